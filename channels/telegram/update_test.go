package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/internal/secret"
)

// heapChild makes the test binary the child of a heap measurement; it holds the test's name.
const heapChild = "TELEGRAM_HEAP_CHILD"

// Polling for updates leaves little behind for the life of the process: decoding the SDK's
// models.Update made encoding/json build its encoders for every type the SDK's Message
// reaches, 388 KB of live heap, a tenth of the gateway's private memory at ready.
func TestAnUpdateLeavesLittleInJSONsCache(t *testing.T) {
	leavesLittle(t, "the first update", updateCacheGrowth)
}

// The first voice note an answer sends leaves little behind either: the SDK's sendVoice
// decoded its result into a models.Message, with the same 0.4 MB of encoding/json's cache,
// and most deployments answer in voice.
func TestAVoiceAnswerLeavesLittleInJSONsCache(t *testing.T) {
	leavesLittle(t, "the first voice answer", voiceAnswerGrowth)
}

// leavesLittle fails t when measure, which returns how much the live heap grew, finds more
// than 150 KB. It measures in a child process running only t's test: in this one the fake
// Bot API, which writes its answers from the SDK's types, fills the same cache.
func leavesLittle(t *testing.T, what string, measure func(*testing.T) int64) {
	if os.Getenv(heapChild) == t.Name() {
		fmt.Println("grew", measure(t))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), heapChild+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var grew int64
	measured := false // the heap may as well have shrunk
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "grew "); ok {
			grew, err = strconv.ParseInt(v, 10, 64)
			measured = err == nil
		}
	}
	if !measured {
		t.Fatalf("the child did not measure:\n%s", out)
	}
	t.Logf("live heap after %s: %d KB more", what, grew>>10)
	if grew > 150<<10 {
		t.Errorf("%s left %d KB of live heap behind; want at most 150 KB", what, grew>>10)
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// updateCacheGrowth polls one update, with a photo and a reply, through getUpdates from a
// server that answers with fixed bytes, and returns how much the live heap grew.
func updateCacheGrowth(t *testing.T) int64 {
	body := `{"ok":true,"result":[{"update_id":1,"message":{"message_id":5,"date":1700000000,` +
		`"from":{"id":7,"is_bot":false,"first_name":"Ada"},"chat":{"id":7,"type":"private","first_name":"Ada"},` +
		`"caption":"look","photo":[{"file_id":"p1","file_unique_id":"u1","width":90,"height":90,"file_size":900}],` +
		`"reply_to_message":{"message_id":4,"date":1699999999,"chat":{"id":7,"type":"private"},"text":"earlier"}}}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c, err := New(Config{Enabled: true, Token: secret.Secret("1:fake"), APIURL: srv.URL},
		Options{Logger: slog.New(slog.DiscardHandler), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Warm everything but the update's types (the HTTP client, callJSON's own decoding):
	// the same call, its result kept as raw JSON.
	var raw json.RawMessage
	if err := c.callJSON(context.Background(), "getUpdates", map[string]any{"offset": 0}, &raw); err != nil {
		t.Fatal(err)
	}
	before := liveHeap()
	ups, err := c.getUpdates(context.Background(), 0)
	if err != nil || len(ups) != 1 || ups[0].Message == nil || len(ups[0].Message.Photo) != 1 {
		t.Fatalf("getUpdates: %v %v", ups, err)
	}
	grew := liveHeap() - before
	runtime.KeepAlive(ups)
	return grew
}

// voiceAnswerGrowth sends one voice note of an answer (sendPart, as a FrameParts does) to a
// server that answers sendVoice with fixed bytes, and returns how much the live heap grew.
// A first voice note, refused, warms everything but the decoding of a sent message.
func voiceAnswerGrowth(t *testing.T) int64 {
	sent := `{"ok":true,"result":{"message_id":12,"date":1700000000,` +
		`"from":{"id":1,"is_bot":true,"first_name":"Gateway","username":"gateway_bot"},` +
		`"chat":{"id":7,"type":"private","first_name":"Ada"},` +
		`"voice":{"file_id":"v1","file_unique_id":"u1","duration":2,"mime_type":"audio/ogg","file_size":31}}}`
	refused := `{"ok":false,"error_code":400,"description":"Bad Request: warming up"}`
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) == 1 {
			_, _ = w.Write([]byte(refused))
			return
		}
		_, _ = w.Write([]byte(sent))
	}))
	defer srv.Close()
	c, err := New(Config{Enabled: true, Token: secret.Secret("1:fake"), APIURL: srv.URL},
		Options{Logger: slog.New(slog.DiscardHandler), StateDir: t.TempDir(),
			Pacing: Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{c: c, chat: 7}
	voice := channels.Part{Type: channels.PartAudio, MIME: "audio/ogg", Voice: true, Duration: 2,
		Data: []byte("OggS\x00\x02 OpusHead a voice note")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.sendPart(ctx, voice); err == nil || !strings.Contains(err.Error(), "warming up") {
		t.Fatalf("the warm-up voice note: %v; want it refused", err)
	}
	before := liveHeap()
	if err := s.sendPart(ctx, voice); err != nil {
		t.Fatal(err)
	}
	grew := liveHeap() - before
	if n := calls.Load(); n != 2 {
		t.Fatalf("the server saw %d calls; want the warm-up and the voice note", n)
	}
	runtime.KeepAlive(s)
	return grew
}
