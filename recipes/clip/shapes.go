package clip

import (
	"image"
	"math"
	"math/rand/v2"
)

// ShapeNames are the pretraining set's objects; an arrow and a triangle point
// left or right.
var ShapeNames = []string{"circle", "square", "triangle", "star", "ring", "cross", "diamond", "arrow"}

// pointing reports whether a shape has a direction in its caption.
func pointing(shape string) bool { return shape == "arrow" || shape == "triangle" }

// Shape caption templates ({shape} is "circle" or "arrow pointing left").
var (
	shapeTrain = []string{
		"a photo of a {size} {color} {shape}",
		"a {color} {shape}",
		"a drawing of a {color} {shape}",
		"the {shape} is {color}",
		"a picture of a {size} {shape} that is {color}",
	}
	shapeHeldOut = []string{
		"the {color} {shape}",
		"a picture of the {color} {shape}",
	}
)

// drawShape draws one coloured shape of a random size and place on a
// background of another colour, with a few grey blobs and noise.
func drawShape(r *rand.Rand, size int) (*image.RGBA, Attrs) {
	S := float64(size)
	c := newCanvas(size, size, 2)
	ci, shi := r.IntN(len(palette)), r.IntN(len(ShapeNames))
	col := jitter(r, palette[ci].C, 0.12, 0.04)
	// A background far enough from the shape's colour to see it.
	var bg rgb
	for {
		bg = rgb{r.Float64(), r.Float64(), r.Float64()}
		if d := math.Abs(bg[0]-col[0]) + math.Abs(bg[1]-col[1]) + math.Abs(bg[2]-col[2]); d > 0.6 {
			break
		}
	}
	c.gradient(0, S, bg, jitter(r, bg, 0.2, 0.05))
	for k := r.IntN(4); k > 0; k-- {
		g := uniform(r, 0.3, 0.7)
		c.ellipse(uniform(r, 0, S), uniform(r, 0, S), uniform(r, 0.03, 0.1)*S, uniform(r, 0.03, 0.1)*S, rgb{g, g, g})
	}
	sizeWord := "small"
	rad := uniform(r, 0.12, 0.2) * S
	if r.IntN(2) == 0 {
		sizeWord, rad = "large", uniform(r, 0.26, 0.4)*S
	}
	cx, cy := uniform(r, rad, S-rad), uniform(r, rad, S-rad)
	shape := ShapeNames[shi]
	dir := Directions[r.IntN(2)]
	sgn := 1.0
	if dir == "left" {
		sgn = -1
	}
	at := func(xy ...float64) []pt { // shape coordinates in radii
		ps := poly(xy...)
		for i := range ps {
			ps[i] = pt{cx + sgn*ps[i].x*rad, cy - ps[i].y*rad}
		}
		return ps
	}
	switch shape {
	case "circle":
		c.circle(cx, cy, rad, col)
	case "square":
		c.rect(cx-rad*0.8, cy-rad*0.8, cx+rad*0.8, cy+rad*0.8, col)
	case "triangle":
		c.polygon(at(1, 0, -0.8, 0.85, -0.8, -0.85), col)
	case "star":
		var ps []float64
		for k := 0; k < 10; k++ {
			a := math.Pi/2 + float64(k)*math.Pi/5
			rr := 1.0
			if k%2 == 1 {
				rr = 0.42
			}
			ps = append(ps, rr*math.Cos(a), rr*math.Sin(a))
		}
		c.polygon(at(ps...), col)
	case "ring":
		c.circle(cx, cy, rad, col)
		c.circle(cx, cy, rad*0.55, bg)
	case "cross":
		c.rect(cx-rad, cy-rad*0.3, cx+rad, cy+rad*0.3, col)
		c.rect(cx-rad*0.3, cy-rad, cx+rad*0.3, cy+rad, col)
	case "diamond":
		c.polygon(at(0, 1, 0.7, 0, 0, -1, -0.7, 0), col)
	case "arrow":
		c.polygon(at(1, 0, 0.2, 0.7, 0.2, 0.3, -1, 0.3, -1, -0.3, 0.2, -0.3, 0.2, -0.7), col)
	}
	phrase := shape
	a := Attrs{"color": palette[ci].Name, "shape": shape, "size": sizeWord}
	if pointing(shape) {
		phrase += " pointing " + dir
		a["direction"] = dir
	}
	a["phrase"] = phrase
	return c.image(r, uniform(r, 0, 0.05)), a
}
