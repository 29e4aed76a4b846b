package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"gateway/channels/web/webtest"
	"gateway/internal/media/mediatest"
)

// TestBrowserSendsAPictureToTheModel: in headless Chromium the user picks a picture with
// the attach button, types a caption and sends; the fake OpenAI API receives the picture
// (its pixels, scaled) and the caption, the answer appears, and the picture is shown in
// the user's bubble.
func TestBrowserSendsAPictureToTheModel(t *testing.T) {
	e := newVisionEnv(t, nil)
	pic := filepath.Join(t.TempDir(), "holiday.jpg")
	if err := os.WriteFile(pic, mediatest.JPEG(1600, 1200), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	if _, err := chromedp.Run(ctx, chromedp.Steps(
		webtest.Open(e.url),
		chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{pic}),
		chromedp.WaitVisible(chromedp.CSS("#tray .chip img")),
		webtest.Say("Where was this taken?"),
	)); err != nil {
		t.Fatal(err)
	}
	b, err := webtest.Answer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "done" || b.Text != seenAnswer {
		t.Fatalf("bubble = %+v; want the answer", b)
	}
	reqs := e.waitRequests(t, 1)
	assertPicture(t, lastUserOf(t, reqs[0]), "Where was this taken?", 1)
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-role=user] img').length`))
	if err != nil || shown != 1 {
		t.Fatalf("the user's bubble shows %d pictures (%v); want 1", shown, err)
	}
	tray, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('tray').hidden`))
	if err != nil || !tray {
		t.Fatalf("the tray is still shown after sending (%v)", err)
	}
	// A reload shows the picture again, from the server's transcript.
	if _, err := chromedp.Run(ctx, chromedp.Steps(webtest.Open(e.url))); err != nil {
		t.Fatal(err)
	}
	src, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const i = document.querySelector('[data-role=user] img'); return i && i.complete && i.naturalWidth > 0 ? i.src : null; })()`))
	if err != nil || !strings.Contains(src, "/media/") {
		t.Fatalf("after a reload the picture is %q (%v)", src, err)
	}

	// Pasting a picture and dropping a text file: both go with the next message.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const canvas = document.createElement('canvas');
		canvas.width = 1600; canvas.height = 1200;
		const g = canvas.getContext('2d');
		g.fillStyle = '#f00'; g.fillRect(0, 0, 800, 600);
		g.fillStyle = '#0f0'; g.fillRect(800, 0, 800, 600);
		g.fillStyle = '#00f'; g.fillRect(0, 600, 800, 600);
		g.fillStyle = '#fff'; g.fillRect(800, 600, 800, 600);
		const bin = atob(canvas.toDataURL('image/png').split(',')[1]);
		const bytes = new Uint8Array(bin.length);
		for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
		const paste = new DataTransfer();
		paste.items.add(new File([bytes], 'image.png', {type: 'image/png'}));
		document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: paste, bubbles: true, cancelable: true}));
		const drop = new DataTransfer();
		drop.items.add(new File(['apples and pears'], 'list.txt', {type: 'text/plain'}));
		window.dispatchEvent(new DragEvent('drop', {dataTransfer: drop, bubbles: true, cancelable: true}));
		return true;
	})()`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Steps(chromedp.WaitVisible(chromedp.CSS("#tray .chip:nth-child(2)")), webtest.Say("And these?"))); err != nil {
		t.Fatal(err)
	}
	if b, err := webtest.Answer(ctx, 1); err != nil || b.State != "done" {
		t.Fatalf("second answer %+v %v", b, err)
	}
	reqs = e.waitRequests(t, 2)
	m := lastUserOf(t, reqs[1])
	assertPicture(t, m, "And these?", 1)
	if !strings.Contains(m.Content, "[file list.txt]\napples and pears") {
		t.Fatalf("the model received %q", m.Content)
	}
}
