package webtest_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"gateway/channels/channeltest"
	"gateway/channels/web"
	"gateway/channels/web/webtest"
)

// The browser, its tab and the served channel all end at the test's cleanup.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBrowserOpensThePage(t *testing.T) {
	ch := web.New(web.Config{Enabled: true}, web.Options{MediaDir: t.TempDir()})
	base := webtest.Serve(t, ch)
	channeltest.Start(t, ch, channeltest.NewSink())
	ctx := webtest.Browser(t)
	if _, err := chromedp.Run(ctx, webtest.Open(base)); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	frames, err := webtest.Frames(ctx)
	if err != nil || len(frames) == 0 || frames[0] != "hello" {
		t.Fatalf("frames %v, %v; want the page greeted first", frames, err)
	}
}
