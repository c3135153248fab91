package clip

import (
	"image"
	"math"
	"math/rand/v2"
)

// Colours of cars and shapes, by caption word.
var palette = []struct {
	Name string
	C    rgb
}{
	{"red", rgb{0.82, 0.08, 0.08}},
	{"orange", rgb{0.96, 0.50, 0.05}},
	{"yellow", rgb{0.96, 0.86, 0.10}},
	{"green", rgb{0.10, 0.58, 0.15}},
	{"blue", rgb{0.10, 0.25, 0.85}},
	{"purple", rgb{0.50, 0.14, 0.62}},
	{"white", rgb{0.95, 0.95, 0.95}},
	{"black", rgb{0.07, 0.07, 0.08}},
}

// Colors are the colour words.
func Colors() []string {
	out := make([]string, len(palette))
	for i, p := range palette {
		out[i] = p.Name
	}
	return out
}

// Directions are where a car's front (an arrow's tip) points.
var Directions = []string{"left", "right"}

// body is a car type's side view in car coordinates: u along the car
// from the rear (0) to the front (1), v up from the ground, both in car
// lengths.
type body struct {
	Name   string
	Scale  float64    // length relative to the others
	Shell  [][]pt     // painted in the car's colour (lower body, cabin, bed)
	Dark   [][]pt     // painted in a darker shade (an open bed)
	Glass  [][]pt     // windows
	Wheels [2]float64 // wheel centres (u)
	R      float64    // wheel radius (and the centres' height)
	Head   [2]float64 // headlight v range, at the front
	Tail   [2]float64 // tail light v range, at the rear
}

func poly(xy ...float64) []pt {
	ps := make([]pt, len(xy)/2)
	for i := range ps {
		ps[i] = pt{xy[2*i], xy[2*i+1]}
	}
	return ps
}

// Bodies are the car types, by caption words.
var bodies = []body{
	{Name: "sedan", Scale: 1,
		Shell: [][]pt{
			poly(0, 0.09, 1, 0.09, 1, 0.22, 0.97, 0.27, 0.74, 0.30, 0.02, 0.31, 0, 0.27),
			poly(0.20, 0.30, 0.33, 0.48, 0.60, 0.48, 0.76, 0.30),
		},
		Glass: [][]pt{
			poly(0.25, 0.32, 0.35, 0.45, 0.46, 0.45, 0.46, 0.32),
			poly(0.49, 0.32, 0.49, 0.45, 0.59, 0.45, 0.70, 0.32),
		},
		Wheels: [2]float64{0.2, 0.8}, R: 0.085, Head: [2]float64{0.17, 0.21}, Tail: [2]float64{0.22, 0.27}},
	{Name: "hatchback", Scale: 0.82,
		Shell: [][]pt{
			poly(0, 0.09, 1, 0.09, 1, 0.24, 0.96, 0.30, 0.72, 0.34, 0, 0.36),
			poly(0, 0.36, 0.05, 0.58, 0.50, 0.60, 0.74, 0.34),
		},
		Glass: [][]pt{
			poly(0.08, 0.39, 0.11, 0.54, 0.30, 0.55, 0.30, 0.38),
			poly(0.34, 0.38, 0.34, 0.55, 0.49, 0.56, 0.67, 0.37),
		},
		Wheels: [2]float64{0.18, 0.82}, R: 0.1, Head: [2]float64{0.18, 0.22}, Tail: [2]float64{0.24, 0.30}},
	{Name: "suv", Scale: 0.95,
		Shell: [][]pt{
			poly(0, 0.13, 1, 0.13, 1, 0.36, 0.97, 0.43, 0.76, 0.46, 0, 0.47),
			poly(0.01, 0.46, 0.03, 0.74, 0.62, 0.75, 0.78, 0.46),
		},
		Glass: [][]pt{
			poly(0.06, 0.50, 0.07, 0.70, 0.30, 0.70, 0.30, 0.50),
			poly(0.34, 0.50, 0.34, 0.70, 0.59, 0.71, 0.72, 0.49),
		},
		Wheels: [2]float64{0.18, 0.82}, R: 0.12, Head: [2]float64{0.28, 0.33}, Tail: [2]float64{0.36, 0.42}},
	{Name: "pickup truck", Scale: 1.05,
		Shell: [][]pt{
			poly(0, 0.13, 0.44, 0.13, 0.44, 0.42, 0, 0.42),
			poly(0.44, 0.13, 1, 0.13, 1, 0.34, 0.97, 0.40, 0.78, 0.42, 0.44, 0.44),
			poly(0.46, 0.44, 0.47, 0.70, 0.66, 0.70, 0.78, 0.42),
		},
		Dark:   [][]pt{poly(0.03, 0.35, 0.41, 0.35, 0.41, 0.42, 0.03, 0.42)},
		Glass:  [][]pt{poly(0.50, 0.47, 0.51, 0.66, 0.64, 0.66, 0.73, 0.46)},
		Wheels: [2]float64{0.16, 0.82}, R: 0.11, Head: [2]float64{0.26, 0.31}, Tail: [2]float64{0.33, 0.39}},
	{Name: "van", Scale: 1,
		Shell: [][]pt{poly(0, 0.09, 1, 0.09, 1, 0.40, 0.86, 0.74, 0.02, 0.76, 0, 0.72)},
		Glass: [][]pt{
			poly(0.05, 0.50, 0.05, 0.66, 0.75, 0.66, 0.75, 0.50),
			poly(0.80, 0.48, 0.80, 0.66, 0.87, 0.66, 0.94, 0.48),
		},
		Wheels: [2]float64{0.17, 0.83}, R: 0.1, Head: [2]float64{0.30, 0.36}, Tail: [2]float64{0.55, 0.65}},
	{Name: "sports car", Scale: 1,
		Shell: [][]pt{
			poly(0, 0.08, 1, 0.08, 1, 0.15, 0.93, 0.20, 0.66, 0.25, 0.02, 0.24, 0, 0.20),
			poly(0.28, 0.24, 0.42, 0.37, 0.58, 0.37, 0.74, 0.24),
			poly(0, 0.24, 0.01, 0.31, 0.10, 0.31, 0.10, 0.28, 0.04, 0.24),
		},
		Glass:  [][]pt{poly(0.33, 0.26, 0.44, 0.35, 0.57, 0.35, 0.68, 0.26)},
		Wheels: [2]float64{0.19, 0.81}, R: 0.08, Head: [2]float64{0.11, 0.14}, Tail: [2]float64{0.17, 0.21}},
}

// BodyTypes are the car types' caption words.
func BodyTypes() []string {
	out := make([]string, len(bodies))
	for i, b := range bodies {
		out[i] = b.Name
	}
	return out
}

// Car caption templates: the training captions use carTrain; held-out
// evaluation uses carHeldOut, new sentences made of words the training
// captions contain (TestHeldOutTemplatesUseKnownWords), with the type
// sometimes before the colour.
var (
	carTrain = []string{
		"a photo of a {color} {type} facing {direction}",
		"a {color} {type} pointing {direction}",
		"a picture of a {color} {type} that faces {direction}",
		"the {type} is {color} and faces {direction}",
		"a {color} {type} seen from the side facing {direction}",
		"a drawing of a {color} {type} facing to the {direction}",
	}
	carHeldOut = []string{
		"a picture of the {color} {type} pointing {direction}",
		"the {color} {type} faces {direction}",
		"a drawing of a {type} that is {color} facing {direction}",
		"a {type} that is {color} facing to the {direction}",
	}
)

// skies are the backgrounds' skies (top and horizon colours); night
// scenes have no clouds or sun.
var skies = []struct {
	Name      string
	Top, Horz rgb
}{
	{"day", rgb{0.35, 0.60, 0.92}, rgb{0.75, 0.87, 1.0}},
	{"dusk", rgb{0.30, 0.25, 0.50}, rgb{0.95, 0.62, 0.40}},
	{"overcast", rgb{0.58, 0.60, 0.64}, rgb{0.82, 0.82, 0.84}},
	{"night", rgb{0.02, 0.03, 0.10}, rgb{0.12, 0.12, 0.22}},
}

var grounds = []struct {
	Name string
	C    rgb
}{
	{"grass", rgb{0.26, 0.52, 0.20}},
	{"sand", rgb{0.84, 0.74, 0.50}},
	{"snow", rgb{0.90, 0.92, 0.96}},
	{"dirt", rgb{0.45, 0.34, 0.24}},
}

// drawCar draws a car scene of size×size pixels: a sky, the ground with a
// road, things behind the road (clouds, sun or moon, trees, buildings),
// and a car of a random colour, type and direction at a random place and
// size, with colour jitter and pixel noise.
func drawCar(r *rand.Rand, size int) (*image.RGBA, Attrs) {
	ci, bi, di := r.IntN(len(palette)), r.IntN(len(bodies)), r.IntN(len(Directions))
	si, gi := r.IntN(len(skies)), r.IntN(len(grounds))
	S := float64(size)
	c := newCanvas(size, size, 2)
	sky, ground := skies[si], grounds[gi]

	horizon := uniform(r, 0.42, 0.62) * S
	c.gradient(0, horizon, jitter(r, sky.Top, 0.1, 0.03), jitter(r, sky.Horz, 0.1, 0.03))
	gc := jitter(r, ground.C, 0.1, 0.03)
	c.gradient(horizon, S, gc.scale(0.85), gc)
	night := sky.Name == "night"
	if night {
		for k := r.IntN(12); k > 0; k-- {
			c.circle(uniform(r, 0, S), uniform(r, 0, horizon*0.8), S*0.008, rgb{0.9, 0.9, 0.8})
		}
		if r.IntN(2) == 0 {
			c.circle(uniform(r, 0.1, 0.9)*S, uniform(r, 0.08, 0.25)*S, uniform(r, 0.04, 0.07)*S, rgb{0.9, 0.9, 0.82})
		}
	} else {
		if sky.Name != "overcast" && r.IntN(2) == 0 {
			sun := rgb{1, 0.92, 0.55}
			if sky.Name == "dusk" {
				sun = rgb{1, 0.55, 0.3}
			}
			c.circle(uniform(r, 0.1, 0.9)*S, uniform(r, 0.08, 0.3)*S, uniform(r, 0.04, 0.08)*S, sun)
		}
		for k := r.IntN(4); k > 0; k-- {
			cx, cy, w := uniform(r, 0, S), uniform(r, 0.05, 0.35)*S, uniform(r, 0.08, 0.2)*S
			cl := jitter(r, rgb{0.96, 0.96, 0.98}, 0.05, 0.02)
			c.ellipse(cx, cy, w, w*0.35, cl)
			c.ellipse(cx+w*0.4, cy-w*0.15, w*0.5, w*0.3, cl)
		}
	}
	// Buildings or trees on the horizon.
	switch r.IntN(3) {
	case 0:
		for x := uniform(r, -0.1, 0.1) * S; x < S; x += uniform(r, 0.12, 0.3) * S {
			w, h := uniform(r, 0.08, 0.2)*S, uniform(r, 0.1, 0.35)*S
			bc := jitter(r, rgb{0.45, 0.45, 0.5}, 0.25, 0.05)
			if night {
				bc = bc.scale(0.4)
			}
			c.rect(x, horizon-h, x+w, horizon+1, bc)
			win := bc.scale(1.5).clamp()
			if night {
				win = rgb{0.9, 0.8, 0.4}
			}
			for wy := horizon - h + 0.03*S; wy < horizon-0.03*S; wy += 0.06 * S {
				for wx := x + 0.02*S; wx < x+w-0.03*S; wx += 0.05 * S {
					c.rect(wx, wy, wx+0.02*S, wy+0.025*S, win)
				}
			}
		}
	case 1:
		for k := 1 + r.IntN(5); k > 0; k-- {
			x, h := uniform(r, 0, S), uniform(r, 0.08, 0.2)*S
			c.rect(x-0.012*S, horizon-h*0.5, x+0.012*S, horizon+0.02*S, rgb{0.35, 0.22, 0.12})
			leaf := jitter(r, rgb{0.12, 0.42, 0.14}, 0.2, 0.04)
			if night {
				leaf = leaf.scale(0.4)
			}
			c.circle(x, horizon-h*0.7, h*0.45, leaf)
		}
	}
	// The road.
	roadTop := uniform(r, 0.70, 0.78) * S
	roadH := uniform(r, 0.12, 0.18) * S
	road := jitter(r, rgb{0.30, 0.30, 0.32}, 0.15, 0.02)
	c.rect(0, roadTop, S, roadTop+roadH, road)
	if r.IntN(2) == 0 {
		off := uniform(r, 0, 0.2) * S
		for x := -off; x < S; x += 0.2 * S {
			c.rect(x, roadTop+roadH*0.8, x+0.1*S, roadTop+roadH*0.88, rgb{0.92, 0.92, 0.85})
		}
	}

	// The car.
	b := bodies[bi]
	col := jitter(r, palette[ci].C, 0.12, 0.04)
	length := math.Min(uniform(r, 0.5, 0.85)*b.Scale, 0.92) * S
	x0 := uniform(r, 0.02*S, S-0.02*S-length)
	base := roadTop + uniform(r, 0.25, 0.65)*roadH
	right := Directions[di] == "right"
	at := func(u, v float64) pt {
		if !right {
			u = 1 - u
		}
		return pt{x0 + u*length, base - v*length}
	}
	place := func(ps []pt) []pt {
		out := make([]pt, len(ps))
		for i, p := range ps {
			out[i] = at(p.x, p.y)
		}
		return out
	}
	for _, s := range b.Shell {
		c.polygon(place(s), col)
	}
	// A darker sill along the bottom of the body.
	c.polygon(place(poly(0, b.R, 1, b.R, 1, b.R+0.03, 0, b.R+0.03)), col.scale(0.7))
	for _, s := range b.Dark {
		c.polygon(place(s), col.scale(0.55))
	}
	glass := jitter(r, rgb{0.55, 0.70, 0.80}, 0.1, 0.03)
	if night {
		glass = glass.scale(0.5)
	}
	for _, g := range b.Glass {
		c.polygon(place(g), glass)
	}
	// Lights: a bright headlight at the front, a red tail light at the
	// rear (with the body's shape, what tells the direction). At 64×64 the
	// lights alone are 2–3 pixels inside one 16-pixel patch, and the cpu
	// model did not learn the direction from them in 5 CPU minutes, not
	// even with every image's mirror beside it in the batch: the
	// headlights are on, with a beam ahead of the car, and exhaust trails
	// behind it — cues the size of a patch.
	h0, h1 := b.Head[0]-0.015, b.Head[1]+0.015
	c.polygon(place(poly(1.0, h0, 1.22, h0-0.05, 1.22, h1+0.03, 1.0, h1)), rgb{1, 0.93, 0.5})
	c.polygon(place(poly(0.94, h0, 1.0, h0, 1.0, h1, 0.94, h1)), rgb{1, 0.97, 0.55})
	for k, du := range []float64{0.05, 0.11, 0.18} {
		p := at(-du, b.R+0.02+0.015*float64(k))
		c.circle(p.x, p.y, (0.025+0.012*float64(k))*length, rgb{0.78, 0.78, 0.8})
	}
	t0, t1 := b.Tail[0]-0.01, b.Tail[1]+0.01
	c.polygon(place(poly(0, t0, 0.045, t0, 0.045, t1, 0, t1)), rgb{0.9, 0.05, 0.05})
	for _, u := range b.Wheels {
		p := at(u, b.R)
		c.circle(p.x, p.y, b.R*length, rgb{0.05, 0.05, 0.05})
		c.circle(p.x, p.y, b.R*length*0.45, rgb{0.62, 0.62, 0.65})
	}
	img := c.image(r, uniform(r, 0, 0.04))
	return img, Attrs{"color": palette[ci].Name, "type": b.Name, "direction": Directions[di],
		"sky": sky.Name, "ground": ground.Name}
}
