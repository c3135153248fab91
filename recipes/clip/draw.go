package clip

import (
	"image"
	"image/color"
	"math"
	"math/rand/v2"
)

// rgb is a colour with channels in [0, 1].
type rgb [3]float64

func (c rgb) scale(f float64) rgb { return rgb{c[0] * f, c[1] * f, c[2] * f} }

func (c rgb) mix(o rgb, t float64) rgb {
	return rgb{c[0] + (o[0]-c[0])*t, c[1] + (o[1]-c[1])*t, c[2] + (o[2]-c[2])*t}
}

func (c rgb) clamp() rgb {
	for i := range c {
		c[i] = math.Min(1, math.Max(0, c[i]))
	}
	return c
}

// pt is a point on the canvas, in pixels of the final image (y down).
type pt struct{ x, y float64 }

// canvas is an RGB image drawn at ss× the final resolution and averaged
// down (anti-aliasing).
type canvas struct {
	w, h, ss int
	px       []rgb // (h·ss) × (w·ss)
}

func newCanvas(w, h, ss int) *canvas {
	return &canvas{w: w, h: h, ss: ss, px: make([]rgb, w*ss*h*ss)}
}

// each calls fn for every sub-pixel centre inside [x0, x1) × [y0, y1)
// (final-image coordinates), with the centre's coordinates.
func (c *canvas) each(x0, y0, x1, y1 float64, fn func(i int, x, y float64)) {
	s := float64(c.ss)
	W, H := c.w*c.ss, c.h*c.ss
	i0, i1 := max(0, int(math.Floor(x0*s))), min(W, int(math.Ceil(x1*s)))
	j0, j1 := max(0, int(math.Floor(y0*s))), min(H, int(math.Ceil(y1*s)))
	for j := j0; j < j1; j++ {
		y := (float64(j) + 0.5) / s
		for i := i0; i < i1; i++ {
			fn(j*W+i, (float64(i)+0.5)/s, y)
		}
	}
}

// fill paints every sub-pixel with colour col.
func (c *canvas) fill(col rgb) {
	for i := range c.px {
		c.px[i] = col
	}
}

// gradient paints rows y0..y1 from top colour a to bottom colour b.
func (c *canvas) gradient(y0, y1 float64, a, b rgb) {
	c.each(0, y0, float64(c.w), y1, func(i int, _, y float64) {
		c.px[i] = a.mix(b, (y-y0)/math.Max(1e-9, y1-y0))
	})
}

func (c *canvas) rect(x0, y0, x1, y1 float64, col rgb) {
	c.each(x0, y0, x1, y1, func(i int, _, _ float64) { c.px[i] = col })
}

func (c *canvas) ellipse(cx, cy, rx, ry float64, col rgb) {
	c.each(cx-rx, cy-ry, cx+rx, cy+ry, func(i int, x, y float64) {
		dx, dy := (x-cx)/rx, (y-cy)/ry
		if dx*dx+dy*dy <= 1 {
			c.px[i] = col
		}
	})
}

func (c *canvas) circle(cx, cy, r float64, col rgb) { c.ellipse(cx, cy, r, r, col) }

// polygon fills a simple polygon (even-odd rule).
func (c *canvas) polygon(ps []pt, col rgb) {
	if len(ps) < 3 {
		return
	}
	x0, y0, x1, y1 := ps[0].x, ps[0].y, ps[0].x, ps[0].y
	for _, p := range ps[1:] {
		x0, x1 = math.Min(x0, p.x), math.Max(x1, p.x)
		y0, y1 = math.Min(y0, p.y), math.Max(y1, p.y)
	}
	c.each(x0, y0, x1, y1, func(i int, x, y float64) {
		if inside(ps, x, y) {
			c.px[i] = col
		}
	})
}

func inside(ps []pt, x, y float64) bool {
	in := false
	for i, j := 0, len(ps)-1; i < len(ps); j, i = i, i+1 {
		a, b := ps[i], ps[j]
		if (a.y > y) != (b.y > y) && x < (b.x-a.x)*(y-a.y)/(b.y-a.y)+a.x {
			in = !in
		}
	}
	return in
}

// image averages the sub-pixels and adds Gaussian noise of standard
// deviation sigma, returning 8-bit RGB.
func (c *canvas) image(r *rand.Rand, sigma float64) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, c.w, c.h))
	W := c.w * c.ss
	n := float64(c.ss * c.ss)
	for y := 0; y < c.h; y++ {
		for x := 0; x < c.w; x++ {
			var s rgb
			for j := 0; j < c.ss; j++ {
				for i := 0; i < c.ss; i++ {
					p := c.px[(y*c.ss+j)*W+x*c.ss+i]
					s[0] += p[0]
					s[1] += p[1]
					s[2] += p[2]
				}
			}
			var out [3]uint8
			for k := range s {
				v := s[k]/n + sigma*r.NormFloat64()
				out[k] = uint8(math.Round(255 * math.Min(1, math.Max(0, v))))
			}
			img.SetRGBA(x, y, color.RGBA{out[0], out[1], out[2], 255})
		}
	}
	return img
}

// jitter multiplies a colour's brightness by a factor in [1−a, 1+a] and
// moves each channel by up to ±b.
func jitter(r *rand.Rand, c rgb, a, b float64) rgb {
	c = c.scale(1 + a*(2*r.Float64()-1))
	for i := range c {
		c[i] += b * (2*r.Float64() - 1)
	}
	return c.clamp()
}

func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }
