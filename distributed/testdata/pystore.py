# A Python TCPStore client of dist.StoreServer (TestStoreServerSpeaksTCPStore):
# every query of libtorch 1.13's TCPStore, and on 2.x (which opens with
# VALIDATE and PING) its newer ones too. argv: port.
import json
import sys
from datetime import timedelta

import torch.distributed as dist

s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, False, timedelta(seconds=10))
out = {}
s.set("a", "hello")
out["get"] = s.get("a").decode()
out["add1"] = s.add("n", 5)
out["add2"] = s.add("n", -2)
out["n"] = s.get("n").decode()
out["cas_absent"] = s.compare_set("c", "", "first").decode()
out["cas_match"] = s.compare_set("c", "first", "second").decode()
out["cas_mismatch"] = s.compare_set("c", "nope", "third").decode()
s.wait(["a", "c"])
out["num_keys"] = s.num_keys()
out["delete"] = s.delete_key("a")
out["delete_again"] = s.delete_key("a")
# A key another client (the Go side) sets after a delay: wait blocks until then.
s.wait(["from_go"], timedelta(seconds=10))
out["from_go"] = s.get("from_go").decode()
try:
    s.wait(["never"], timedelta(milliseconds=300))
    out["wait_timeout"] = False
except Exception:
    out["wait_timeout"] = True
if hasattr(s, "queue_push"):  # libtorch 2.x
    # The timed-out wait above was canceled (CANCEL_WAIT): the connection
    # is still in step.
    out["after_timeout"] = s.get("c").decode()
    s.append("ap", "ab")
    s.append("ap", "cd")
    out["append"] = s.get("ap").decode()
    s.multi_set(["m1", "m2"], ["x", "y"])
    out["multi_get"] = [v.decode() for v in s.multi_get(["m1", "m2"])]
    out["check"] = [s.check(["m1", "m2"]), s.check(["m1", "absent"])]
    s.queue_push("q", "v1")
    s.queue_push("q", "v2")
    out["queue_len"] = s.queue_len("q")
    out["queue_pop"] = [s.queue_pop("q").decode(), s.queue_pop("q", False).decode()]
    try:
        s.queue_pop("q", False)
        out["queue_empty"] = False
    except dist.QueueEmptyError:
        out["queue_empty"] = True
    out["list_keys"] = sorted(s.list_keys())
print(json.dumps(out))
