package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"gateway/internal/secret"
)

// updateCacheChild makes the test binary the child of TestAnUpdateLeavesLittleInJSONsCache.
const updateCacheChild = "TELEGRAM_UPDATE_CACHE_CHILD"

// Polling for updates leaves little behind for the life of the process: decoding the SDK's
// models.Update made encoding/json build its encoders for every type the SDK's Message
// reaches, 388 KB of live heap, a tenth of the gateway's private memory at ready. Measured in
// a child process: in this one the fake Bot API, which writes its updates from the SDK's
// types, fills the same cache.
func TestAnUpdateLeavesLittleInJSONsCache(t *testing.T) {
	if os.Getenv(updateCacheChild) == "1" {
		fmt.Println("grew", updateCacheGrowth(t))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAnUpdateLeavesLittleInJSONsCache$", "-test.count=1")
	cmd.Env = append(os.Environ(), updateCacheChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var grew int64 = -1
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "grew "); ok {
			grew, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if grew < 0 {
		t.Fatalf("the child did not measure:\n%s", out)
	}
	t.Logf("live heap after the first update: %d KB more", grew>>10)
	if grew > 150<<10 {
		t.Errorf("the first update left %d KB of live heap behind; want at most 150 KB", grew>>10)
	}
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
	live := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := live()
	ups, err := c.getUpdates(context.Background(), 0)
	if err != nil || len(ups) != 1 || ups[0].Message == nil || len(ups[0].Message.Photo) != 1 {
		t.Fatalf("getUpdates: %v %v", ups, err)
	}
	grew := live() - before
	runtime.KeepAlive(ups)
	return grew
}
