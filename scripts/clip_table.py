"""The CLIP recipe's side-by-side table (recipes/clip/README.md) from the logs
scripts/clip_quality.sh leaves in OUT: for each layout, the training
summary line of `torchfit clip train` (steps, CPU minutes, peak memory from
torchfit's counting allocator) and the held-out scores of `torchfit clip
eval` on its last checkpoint.

    /usr/bin/python3 scripts/clip_table.py OUT
"""
import re
import sys

out = sys.argv[1]
print("| layout | steps | samples seen | CPU minutes | peak memory (counter) | test zero-shot accuracy | colour / type / direction | text→image R@1 | test loss |")
print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
for name, label, eff in [("exact", "exact 16 × 8 (grad cache)", 128),
                         ("naive", "naive 16 × 8 (the seed's)", 128),
                         ("plain16", "plain batch 16", 16)]:
    log = open(f"{out}/{name}.log").read()
    steps, cpu, peak = re.search(r"train: (\d+) steps .* in ([\d.]+) CPU minutes .* peak memory ([\d.]+ [KMG]iB)", log).groups()
    text = open(f"{out}/eval-{name}.txt").read()
    m = re.search(r"zero-shot accuracy ([\d.]+) \(color ([\d.]+), type ([\d.]+), direction ([\d.]+)\), "
                  r"text→image R@1 ([\d.]+), loss ([\d.]+)", text)
    zs, c, t, d, r1, loss = m.groups()
    print(f"| {label} | {steps} | {int(steps) * eff} | {cpu} | {peak} | **{zs}** | {c} / {t} / {d} | {r1} | {loss} |")
text = open(f"{out}/eval-pretrained.txt").read()
m = re.search(r"zero-shot accuracy ([\d.]+) \(color ([\d.]+), type ([\d.]+), direction ([\d.]+)\), "
              r"text→image R@1 ([\d.]+), loss ([\d.]+)", text)
zs, c, t, d, r1, loss = m.groups()
print(f"| pretrained on shapes, not fine-tuned | 0 | 0 | – | – | {zs} | {c} / {t} / {d} | {r1} | {loss} |")
