// Package media turns what users send into what a model can take: images decoded, turned
// upright and scaled down to a provider's useful size; documents turned into bounded text.
package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/webp"
)

// MaxImagePixels refuses images whose decoded size would be unreasonable (a decompression
// bomb): 50 megapixels is far above any phone camera's photo.
const MaxImagePixels = 50_000_000

// ErrNotImage is returned for data that is none of JPEG, PNG, GIF or WebP.
var ErrNotImage = errors.New("not a JPEG, PNG, GIF or WebP image")

// Image is an image ready for a model.
type Image struct {
	Data          []byte
	MIME          string // image/jpeg or image/png
	Width, Height int    // after scaling
	SrcW, SrcH    int    // as sent (upright)
}

// PrepareImage decodes data (JPEG, PNG, GIF's first frame, WebP), applies a JPEG's EXIF
// orientation, and scales it so that its longer side is at most maxSide and its area at most
// maxPixels (0: no bound). An image already within bounds and already JPEG or PNG, upright,
// is passed through untouched. Scaled images are re-encoded as JPEG, or PNG when they have
// transparency.
func PrepareImage(data []byte, maxSide, maxPixels int) (Image, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		if cfg, err = webp.DecodeConfig(bytes.NewReader(data)); err != nil {
			return Image{}, ErrNotImage
		}
		format = "webp"
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > MaxImagePixels {
		return Image{}, fmt.Errorf("the image is %d×%d pixels, more than this gateway decodes", cfg.Width, cfg.Height)
	}
	orient := 1
	if format == "jpeg" {
		orient = jpegOrientation(data)
	}
	w, h := cfg.Width, cfg.Height
	if orient >= 5 { // 5–8 swap width and height
		w, h = h, w
	}
	tw, th := fit(w, h, maxSide, maxPixels)
	if tw == w && th == h && orient == 1 && (format == "jpeg" || format == "png") {
		return Image{Data: data, MIME: "image/" + format, Width: w, Height: h, SrcW: w, SrcH: h}, nil
	}
	var src image.Image
	switch format {
	case "webp":
		src, err = webp.Decode(bytes.NewReader(data))
	case "gif":
		src, err = gif.Decode(bytes.NewReader(data)) // the first frame
	default:
		src, _, err = image.Decode(bytes.NewReader(data))
	}
	if err != nil {
		return Image{}, fmt.Errorf("the image could not be decoded: %w", err)
	}
	// Scale first, in the picture's stored orientation, then stand the small result upright:
	// turning a 12-megapixel phone photo pixel by pixel would cost more than all the rest.
	sw, sh := tw, th
	if orient >= 5 {
		sw, sh = th, tw
	}
	dst := orientImage(scaleTo(src, sw, sh), orient)
	var buf bytes.Buffer
	out := Image{Width: tw, Height: th, SrcW: w, SrcH: h}
	if opaque(dst) {
		err, out.MIME = jpeg.Encode(&buf, dst, &jpeg.Options{Quality: 85}), "image/jpeg"
	} else {
		err, out.MIME = png.Encode(&buf, dst), "image/png"
	}
	if err != nil {
		return Image{}, err
	}
	out.Data = buf.Bytes()
	return out, nil
}

// fit scales w×h down (never up) to a longer side of at most maxSide and an area of at most
// maxPixels, keeping the aspect ratio.
func fit(w, h, maxSide, maxPixels int) (int, int) {
	scale := 1.0
	if maxSide > 0 && max(w, h) > maxSide {
		scale = float64(maxSide) / float64(max(w, h))
	}
	if maxPixels > 0 {
		if area := float64(w) * float64(h) * scale * scale; area > float64(maxPixels) {
			scale *= math.Sqrt(float64(maxPixels) / area)
		}
	}
	if scale >= 1 {
		return w, h
	}
	return max(1, int(float64(w)*scale+0.5)), max(1, int(float64(h)*scale+0.5))
}

func opaque(img *image.RGBA) bool {
	for i := 3; i < len(img.Pix); i += 4 {
		if img.Pix[i] != 0xff {
			return false
		}
	}
	return true
}

// orientImage applies EXIF orientation o (1–8) so the picture stands as the camera saw it.
// scaleTo returns src as RGBA at w×h. A large reduction first averages k×k blocks (a box
// filter: fast, and free of aliasing), then Catmull-Rom takes the rest of the way.
func scaleTo(src image.Image, w, h int) *image.RGBA {
	b := src.Bounds()
	if b.Dx() == w && b.Dy() == h {
		return toRGBA(src)
	}
	if k := min(b.Dx()/w, b.Dy()/h); k >= 2 {
		src = boxShrink(toRGBA(src), k)
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	xdraw.CatmullRom.Scale(dst, dst.Bounds(), src, src.Bounds(), xdraw.Src, nil)
	return dst
}

// toRGBA converts (the standard library has fast paths for JPEG's YCbCr and for paletted
// pictures) or returns src when it is already RGBA at the origin.
func toRGBA(src image.Image) *image.RGBA {
	if r, ok := src.(*image.RGBA); ok && r.Rect.Min == (image.Point{}) {
		return r
	}
	b := src.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Bounds(), src, b.Min, draw.Src)
	return dst
}

// boxShrink averages k×k blocks of src (premultiplied, so alpha is averaged right too).
func boxShrink(src *image.RGBA, k int) *image.RGBA {
	w, h := src.Rect.Dx()/k, src.Rect.Dy()/k
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	n := uint32(k * k)
	sums := make([]uint32, 4*w)
	for y := 0; y < h; y++ {
		clear(sums)
		for yy := y * k; yy < y*k+k; yy++ {
			row := src.Pix[yy*src.Stride : yy*src.Stride+4*w*k]
			for x := 0; x < w; x++ {
				s := sums[4*x : 4*x+4 : 4*x+4]
				px := row[4*x*k : 4*(x+1)*k]
				for i := 0; i < len(px); i += 4 {
					s[0] += uint32(px[i])
					s[1] += uint32(px[i+1])
					s[2] += uint32(px[i+2])
					s[3] += uint32(px[i+3])
				}
			}
		}
		out := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
		for i, v := range sums {
			out[i] = uint8((v + n/2) / n)
		}
	}
	return dst
}

// orientImage stands a picture upright per its EXIF orientation (1–8).
func orientImage(src *image.RGBA, o int) *image.RGBA {
	if o <= 1 || o > 8 {
		return src
	}
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	dw, dh := w, h
	if o >= 5 {
		dw, dh = h, w
	}
	dst := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			var dx, dy int
			switch o {
			case 2: // mirrored
				dx, dy = w-1-x, y
			case 3: // rotated 180
				dx, dy = w-1-x, h-1-y
			case 4: // mirrored vertically
				dx, dy = x, h-1-y
			case 5: // transposed
				dx, dy = y, x
			case 6: // rotated 90 clockwise to stand upright
				dx, dy = h-1-y, x
			case 7: // transversed
				dx, dy = h-1-y, w-1-x
			case 8: // rotated 90 counter-clockwise to stand upright
				dx, dy = y, w-1-x
			}
			si, di := src.PixOffset(b.Min.X+x, b.Min.Y+y), dst.PixOffset(dx, dy)
			copy(dst.Pix[di:di+4], src.Pix[si:si+4])
		}
	}
	return dst
}

// Bounds say how large an image may reach a model: its long side, its short side and its
// area in pixels (0: no bound on that measure). OpenAI's high detail, for one, fits an image
// in 2048×2048 and then its short side in 768; Anthropic wants the long side ≤ 1568 and at
// most about 1.15 megapixels.
type Bounds struct {
	Long, Short, Pixels int
}

// PrepareImageWithin is PrepareImage with all three bounds.
func PrepareImageWithin(data []byte, b Bounds) (Image, error) {
	maxSide := b.Long
	if b.Short > 0 {
		if w, h, err := ImageSize(data); err == nil && min(w, h) > b.Short {
			long := int(float64(max(w, h)) * float64(b.Short) / float64(min(w, h)))
			if maxSide <= 0 || long < maxSide {
				maxSide = long
			}
		}
	}
	return PrepareImage(data, maxSide, b.Pixels)
}

// ImageSize reads an image's dimensions from its header (as stored: orientation does not
// change which side is the short one).
func ImageSize(data []byte) (int, int, error) {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		if cfg, err = webp.DecodeConfig(bytes.NewReader(data)); err != nil {
			return 0, 0, ErrNotImage
		}
	}
	return cfg.Width, cfg.Height, nil
}
