package media

import (
	"bytes"
	"context"
	"encoding/binary"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"gateway/internal/media/mediatest"
	"time"
)

// quadrants is a w×h picture: red top-left, green top-right, blue bottom-left, white bottom-right.
func quadrants(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.RGBA{255, 255, 255, 255}
			switch {
			case x < w/2 && y < h/2:
				c = color.RGBA{255, 0, 0, 255}
			case y < h/2:
				c = color.RGBA{0, 255, 0, 255}
			case x < w/2:
				c = color.RGBA{0, 0, 255, 255}
			}
			img.Set(x, y, c)
		}
	}
	return img
}

func near(t *testing.T, img image.Image, x, y int, want color.RGBA, what string) {
	t.Helper()
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(a uint32, b uint8) int { v := int(a>>8) - int(b); return max(v, -v) }
	if d(r, want.R) > 40 || d(g, want.G) > 40 || d(b, want.B) > 40 {
		t.Errorf("%s: pixel (%d,%d) = %d,%d,%d; want about %v", what, x, y, r>>8, g>>8, b>>8, want)
	}
}

func decode(t *testing.T, im Image) image.Image {
	t.Helper()
	img, _, err := image.Decode(bytes.NewReader(im.Data))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != im.Width || img.Bounds().Dy() != im.Height {
		t.Fatalf("decoded %v; Image says %d×%d", img.Bounds(), im.Width, im.Height)
	}
	return img
}

func TestPrepareImageScalesAndKeepsThePicture(t *testing.T) {
	var pngData bytes.Buffer
	if err := png.Encode(&pngData, quadrants(3000, 1500)); err != nil {
		t.Fatal(err)
	}
	im, err := PrepareImage(pngData.Bytes(), 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if im.Width != 1000 || im.Height != 500 || im.MIME != "image/jpeg" || im.SrcW != 3000 {
		t.Fatalf("got %d×%d %s (from %d×%d)", im.Width, im.Height, im.MIME, im.SrcW, im.SrcH)
	}
	img := decode(t, im)
	near(t, img, 100, 100, color.RGBA{255, 0, 0, 255}, "top-left")
	near(t, img, 900, 100, color.RGBA{0, 255, 0, 255}, "top-right")
	near(t, img, 100, 400, color.RGBA{0, 0, 255, 255}, "bottom-left")
	near(t, img, 900, 400, color.RGBA{255, 255, 255, 255}, "bottom-right")

	// An area bound too: 1000×500 at most 125,000 pixels → 500×250.
	if im, err = PrepareImage(pngData.Bytes(), 0, 125_000); err != nil || im.Width != 500 || im.Height != 250 {
		t.Fatalf("area bound: %d×%d %v", im.Width, im.Height, err)
	}
	// Small enough: passed through as sent.
	var small bytes.Buffer
	_ = png.Encode(&small, quadrants(40, 20))
	if im, err = PrepareImage(small.Bytes(), 1000, 0); err != nil || !bytes.Equal(im.Data, small.Bytes()) || im.MIME != "image/png" {
		t.Fatalf("small PNG not passed through: %v", err)
	}
}

func TestPrepareImageGIFAndNonImages(t *testing.T) {
	var g bytes.Buffer
	pal := image.NewPaletted(image.Rect(0, 0, 64, 32), color.Palette{color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 255, 255}})
	for y := 0; y < 32; y++ {
		for x := 32; x < 64; x++ {
			pal.SetColorIndex(x, y, 1)
		}
	}
	if err := gif.Encode(&g, pal, nil); err != nil {
		t.Fatal(err)
	}
	im, err := PrepareImage(g.Bytes(), 1000, 0)
	if err != nil || im.MIME != "image/jpeg" {
		t.Fatalf("GIF: %v %s", err, im.MIME)
	}
	img := decode(t, im)
	near(t, img, 5, 5, color.RGBA{255, 0, 0, 255}, "gif left")
	near(t, img, 60, 5, color.RGBA{0, 0, 255, 255}, "gif right")
	if _, err := PrepareImage([]byte("%PDF-1.4 not an image"), 1000, 0); err != ErrNotImage {
		t.Fatalf("non-image: %v", err)
	}
}

// withOrientation puts an EXIF APP1 segment holding Orientation o right after SOI.
func withOrientation(jpg []byte, o uint16) []byte {
	var tiff bytes.Buffer
	tiff.WriteString("MM")
	_ = binary.Write(&tiff, binary.BigEndian, uint16(42))
	_ = binary.Write(&tiff, binary.BigEndian, uint32(8))
	_ = binary.Write(&tiff, binary.BigEndian, uint16(1))           // one entry
	_ = binary.Write(&tiff, binary.BigEndian, []uint16{0x0112, 3}) // Orientation, SHORT
	_ = binary.Write(&tiff, binary.BigEndian, uint32(1))           // count
	_ = binary.Write(&tiff, binary.BigEndian, []uint16{o, 0})      // value
	_ = binary.Write(&tiff, binary.BigEndian, uint32(0))           // next IFD
	seg := append([]byte("Exif\x00\x00"), tiff.Bytes()...)
	app1 := []byte{0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	out := append([]byte{}, jpg[:2]...)
	out = append(out, app1...)
	out = append(out, seg...)
	return append(out, jpg[2:]...)
}

func TestPrepareImageStandsAPhotoUpright(t *testing.T) {
	var j bytes.Buffer
	if err := jpeg.Encode(&j, quadrants(200, 100), &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	// Orientation 6: the camera was turned; the upright picture is 100 wide, 200 high, and
	// what was stored top-left (red) is now top-right.
	im, err := PrepareImage(withOrientation(j.Bytes(), 6), 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if im.Width != 100 || im.Height != 200 {
		t.Fatalf("upright size %d×%d; want 100×200", im.Width, im.Height)
	}
	img := decode(t, im)
	near(t, img, 90, 10, color.RGBA{255, 0, 0, 255}, "red after rotation")
	near(t, img, 10, 10, color.RGBA{0, 0, 255, 255}, "blue after rotation")
	if o := jpegOrientation(j.Bytes()); o != 1 {
		t.Fatalf("a JPEG without EXIF reads orientation %d", o)
	}
}

func TestPrepareImageWebP(t *testing.T) {
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("ffmpeg is not installed")
		}
		t.Skip("ffmpeg not installed")
	}
	dir := t.TempDir()
	var p bytes.Buffer
	_ = png.Encode(&p, quadrants(400, 200))
	in, out := filepath.Join(dir, "in.png"), filepath.Join(dir, "out.webp")
	if err := os.WriteFile(in, p.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(ffmpeg, "-loglevel", "error", "-i", in, out).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, b)
	}
	data, _ := os.ReadFile(out)
	im, err := PrepareImage(data, 200, 0)
	if err != nil {
		t.Fatal(err)
	}
	img := decode(t, im)
	if im.Width != 200 || im.Height != 100 {
		t.Fatalf("%d×%d", im.Width, im.Height)
	}
	near(t, img, 20, 20, color.RGBA{255, 0, 0, 255}, "webp top-left")
	near(t, img, 180, 80, color.RGBA{255, 255, 255, 255}, "webp bottom-right")
}

func TestDocumentText(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	doc, err := DocumentText(ctx, write("notes.txt", []byte("shopping: milk, eggs")), "text/plain", "notes.txt", 0)
	if err != nil || doc.Text != "shopping: milk, eggs" || doc.Truncated {
		t.Fatalf("txt: %+v %v", doc, err)
	}
	// Bounded, cut at a rune boundary.
	doc, err = DocumentText(ctx, write("long.md", []byte(strings.Repeat("é", 100))), "", "long.md", 51)
	if err != nil || !doc.Truncated || len(doc.Text) != 50 {
		t.Fatalf("bounded: %d bytes, truncated %v, %v", len(doc.Text), doc.Truncated, err)
	}
	if _, err := DocumentText(ctx, write("data.json", []byte{0x7b, 0, 0xff}), "application/json", "data.json", 0); err == nil {
		t.Fatal("binary posing as JSON was read as text")
	}
	if _, err := DocumentText(ctx, write("a.zip", []byte("PK")), "application/zip", "a.zip", 0); err != ErrNotText {
		t.Fatalf("zip: %v", err)
	}
	if _, err := exec.LookPath("pdftotext"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pdftotext is not installed (poppler-utils)")
		}
		t.Skip("pdftotext not installed")
	}
	doc, err = DocumentText(ctx, write("invoice.pdf", mediatest.PDF("Invoice 4711 total 42 EUR")), "application/pdf", "invoice.pdf", 0)
	if err != nil || !strings.Contains(doc.Text, "Invoice 4711 total 42 EUR") || doc.Kind != "pdf" {
		t.Fatalf("pdf: %+v %v", doc, err)
	}
	if _, err := DocumentText(ctx, write("broken.pdf", []byte("%PDF-1.4 garbage")), "application/pdf", "broken.pdf", 0); err == nil {
		t.Fatal("a broken PDF read without error")
	}
}

// Text files saved by Windows programs are read as text: a CSV from Excel in the Windows
// code page (Windows-1252), a log written by PowerShell in UTF-16 with its byte order mark,
// a file starting with UTF-8's byte order mark. Binary data stays refused.
func TestDocumentTextOfWindowsEncodings(t *testing.T) {
	dir := t.TempDir()
	read := func(name string, data []byte, max int) (Document, error) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return DocumentText(context.Background(), p, "text/plain", name, max)
	}
	utf16 := func(bom []byte, s string, le bool) []byte {
		b := append([]byte{}, bom...)
		for _, u := range utf16.Encode([]rune(s)) {
			if le {
				b = append(b, byte(u), byte(u>>8))
			} else {
				b = append(b, byte(u>>8), byte(u))
			}
		}
		return b
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"excel.csv", []byte("Caf\xe9;Na\xefve;\x80 12\r\n"), "Café;Naïve;€ 12\r\n"},
		{"ps-le.log", utf16([]byte{0xff, 0xfe}, "Größe: 5 €\r\n", true), "Größe: 5 €\r\n"},
		{"be.txt", utf16([]byte{0xfe, 0xff}, "日本語", false), "日本語"},
		{"bom.txt", []byte("\xef\xbb\xbfhello"), "hello"},
		{"mixed.log", []byte("na\xc3\xafve \xff end"), "naïve \uFFFD end"},
	} {
		doc, err := read(c.name, c.data, 0)
		if err != nil || doc.Text != c.want || doc.Truncated {
			t.Errorf("%s: %q, truncated %v, %v; want %q", c.name, doc.Text, doc.Truncated, err, c.want)
		}
	}
	// The bound holds on the text as the model gets it.
	doc, err := read("long.csv", []byte(strings.Repeat("\xe9", 100)), 51)
	if err != nil || !doc.Truncated || len(doc.Text) > 51 || !utf8.ValidString(doc.Text) {
		t.Errorf("bounded Windows-1252: %d bytes, truncated %v, %v", len(doc.Text), doc.Truncated, err)
	}
	if _, err := read("blob.txt", []byte("\x01\x02\x03\xff\xfe\x80\x90\x1b"), 0); err == nil {
		t.Error("binary data without a zero byte was read as text")
	}
}

func TestStoreKeepsAndPrunes(t *testing.T) {
	root := t.TempDir()
	st, err := OpenStore(filepath.Join(root, "media"), StoreConfig{MaxAge: time.Hour, MaxBytes: 2500})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "download.bin")
	write := func(p string, n int) {
		if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(src, 1000)
	a, err := st.Keep(src, "../../etc/My Photo.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a, st.Dir()) || !strings.HasSuffix(a, "-My_Photo.jpg") {
		t.Fatalf("kept at %s", a)
	}
	if again, err := st.Keep(a, ""); err != nil || again != a {
		t.Fatalf("a kept file kept again: %s %v", again, err)
	}
	os.Remove(src) // the adapter's copy goes; ours stays
	if _, err := os.Stat(a); err != nil {
		t.Fatal(err)
	}
	// Too old: pruned by age.
	old := filepath.Join(st.Dir(), "old.bin")
	write(old, 10)
	past := time.Now().Add(-2 * time.Hour)
	os.Chtimes(old, past, past)
	// Over the byte bound: the oldest go first.
	b := filepath.Join(st.Dir(), "b.bin")
	c := filepath.Join(st.Dir(), "c.bin")
	write(b, 1000)
	write(c, 1000)
	os.Chtimes(a, time.Now().Add(-30*time.Minute), time.Now().Add(-30*time.Minute))
	n, freed, err := st.Prune()
	if err != nil || n != 2 || freed != 1010 {
		t.Fatalf("pruned %d files, %d bytes, %v", n, freed, err)
	}
	for p, want := range map[string]bool{old: false, a: false, b: true, c: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists=%v; want %v", p, err == nil, want)
		}
	}
}
