// Package mediatest makes pictures and documents for tests of what the model sees: a
// four-colour picture whose quadrants survive scaling and re-encoding, and a real PDF with a
// text layer that pdftotext reads.
package mediatest

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
)

// The colours of the quadrants: top-left, top-right, bottom-left, bottom-right.
var (
	TopLeft     = color.RGBA{255, 0, 0, 255}
	TopRight    = color.RGBA{0, 255, 0, 255}
	BottomLeft  = color.RGBA{0, 0, 255, 255}
	BottomRight = color.RGBA{255, 255, 255, 255}
)

// Quadrants is a w×h picture in four colours.
func Quadrants(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := BottomRight
			switch {
			case x < w/2 && y < h/2:
				c = TopLeft
			case y < h/2:
				c = TopRight
			case x < w/2:
				c = BottomLeft
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

// JPEG is Quadrants(w, h) as a JPEG (what a phone sends).
func JPEG(w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, Quadrants(w, h), &jpeg.Options{Quality: 90}); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// Photo is Quadrants(w, h) with grain (±20 per channel, deterministic) as a JPEG: it
// compresses like a real photo, so request sizes measured with it are realistic.
func Photo(w, h int) []byte {
	img := Quadrants(w, h)
	seed := uint32(2463534242)
	for i := range img.Pix {
		if i%4 == 3 {
			continue
		}
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		v := int(img.Pix[i]) + int(seed%41) - 20
		img.Pix[i] = uint8(max(0, min(255, v)))
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// PNG is Quadrants(w, h) as a PNG (a screenshot).
func PNG(w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, Quadrants(w, h)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// CheckQuadrants decodes data and reports how it differs from Quadrants of its size
// (nil when the four colours are where they belong), and the decoded size.
func CheckQuadrants(data []byte) (w, h int, err error) {
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return 0, 0, err
	}
	b := img.Bounds()
	w, h = b.Dx(), b.Dy()
	for _, c := range []struct {
		x, y int
		want color.RGBA
		name string
	}{{w / 4, h / 4, TopLeft, "top-left"}, {3 * w / 4, h / 4, TopRight, "top-right"}, {w / 4, 3 * h / 4, BottomLeft, "bottom-left"}, {3 * w / 4, 3 * h / 4, BottomRight, "bottom-right"}} {
		r, g, bl, _ := img.At(b.Min.X+c.x, b.Min.Y+c.y).RGBA()
		d := func(a uint32, b uint8) int { v := int(a>>8) - int(b); return max(v, -v) }
		if d(r, c.want.R) > 40 || d(g, c.want.G) > 40 || d(bl, c.want.B) > 40 {
			return w, h, fmt.Errorf("%s pixel (%d,%d) is %d,%d,%d; want about %v", c.name, c.x, c.y, r>>8, g>>8, bl>>8, c.want)
		}
	}
	return w, h, nil
}

// PDF is a one-page PDF whose text layer says text (ASCII, no parentheses).
func PDF(text string) []byte {
	stream := fmt.Sprintf("BT /F1 12 Tf 72 720 Td (%s) Tj ET", text)
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(stream), stream),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}
