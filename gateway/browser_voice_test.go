package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"gateway/builtins/voicetest"
	"gateway/channels/web/webtest"
)

// TestBrowserRecordsVoiceNoteAndPlaysSpokenReply: Chromium's fake microphone plays a spoken
// WAV, the page records it with MediaRecorder and sends it; pocketsphinx hears the words, the
// model answers, and the bubble carries a playable Ogg/Opus voice reply from espeak-ng.
func TestBrowserRecordsVoiceNoteAndPlaysSpokenReply(t *testing.T) {
	e := newEnv(t, localVoice(t))
	wav := voicetest.WriteFile(t, "spoken.wav", voicetest.SpeakWAV(t, spoken))
	ctx := webtest.Browser(t, webtest.FakeMicrophone(wav)...)
	if err := chromedp.Do(ctx, webtest.Open(e.url), chromedp.Click(chromedp.CSS("#record"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('record').dataset.state === 'recording'`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("recording did not start: %v", err)
	}
	time.Sleep(3 * time.Second) // the phrase is about two seconds long
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#record"))); err != nil {
		t.Fatal(err)
	}
	ans, err := webtest.Answer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ans.State != "done" {
		t.Fatalf("answer %+v; want done", ans)
	}
	assertHeard(t, e)
	src, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(() => { const a = document.querySelector('[data-role=assistant] audio'); return a ? a.getAttribute('src') : ''; })()`))
	if err != nil || src == "" {
		t.Fatalf("the answer has no <audio> player (%v)", err)
	}
	if !strings.HasPrefix(src, "http") {
		src = e.url + src
	}
	resp, err := http.Get(src)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertPlayableOpus(t, b)
}
