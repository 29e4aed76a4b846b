package web_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"gateway/channels"
	"gateway/channels/web"
)

// Pictures and files sent with a message arrive as image and file parts with their names;
// too many, too large or damaged ones are refused with a reason, and the socket goes on.
func TestFilesArriveAsParts(t *testing.T) {
	_, base, sink := started(t, web.Config{MaxUploadBytes: 1000})
	tb, err := openTab(t, base, "files")
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tb.write(t, map[string]any{"type": "message", "id": "f1", "chat_id": "files", "text": "look", "files": []map[string]string{
		{"mime": "image/png", "name": "shot.png", "data": b64("\x89PNG pretend")},
		{"mime": "", "name": "../../notes.txt", "data": b64("hello")},
		{"mime": "image/svg+xml", "name": "logo.svg", "data": b64("<svg/>")}}})
	m := sink.Next(t)
	if m.Text() != "look" || len(m.Parts) != 4 {
		t.Fatalf("delivered %q with %d parts", m.Text(), len(m.Parts))
	}
	want := []struct {
		typ        channels.PartType
		mime, name string
	}{{channels.PartImage, "image/png", "shot.png"}, {channels.PartFile, "text/plain", "notes.txt"}, {channels.PartFile, "image/svg+xml", "logo.svg"}}
	for i, w := range want {
		p := m.Parts[i+1]
		if p.Type != w.typ || p.MIME != w.mime || p.Name != w.name || p.Path == "" || strings.Contains(p.Path, "..") {
			t.Errorf("part %d = %+v; want %v %s %s", i, p, w.typ, w.mime, w.name)
		}
	}
	if f := tb.next(t, "ack", "error"); f.Type != "ack" {
		t.Fatalf("reply %+v; want ack", f)
	}
	for _, c := range []struct {
		files []map[string]string
		says  string
	}{
		{[]map[string]string{{"name": "a.bin", "data": b64(strings.Repeat("x", 600))}, {"name": "b.bin", "data": b64(strings.Repeat("x", 600))}}, "too large"},
		{[]map[string]string{{"name": "a.txt", "data": "%%%"}}, "damaged"},
		{make([]map[string]string, 11), "the limit is 10"},
	} {
		tb.write(t, map[string]any{"type": "message", "id": "bad", "chat_id": "files", "files": c.files})
		if f := tb.next(t, "ack", "error"); f.Type != "error" || !strings.Contains(f.Text, c.says) {
			t.Errorf("reply %+v; want an error saying %q", f, c.says)
		}
	}
	// An image alone, no text, is a message.
	tb.write(t, map[string]any{"type": "message", "id": "f2", "chat_id": "files", "files": []map[string]string{{"mime": "image/jpeg", "name": "p.jpg", "data": b64("\xff\xd8")}}})
	if m := sink.Next(t); len(m.Parts) != 1 || m.Parts[0].Type != channels.PartImage {
		t.Fatalf("delivered %+v", m.Parts)
	}
	// An audio file attached (a recording made elsewhere) is audio, as on every other
	// platform, so that it is transcribed; it is no voice note, so the answer is not spoken.
	tb.write(t, map[string]any{"type": "message", "id": "f3", "chat_id": "files", "files": []map[string]string{
		{"mime": "audio/mp4", "name": "memo.m4a", "data": b64("pretend m4a")}, {"name": "song.mp3", "data": b64("pretend mp3")}}})
	m = sink.Next(t)
	if len(m.Parts) != 2 || m.IsVoice {
		t.Fatalf("delivered %+v (voice %v); want two audio parts, no voice note", m.Parts, m.IsVoice)
	}
	for _, p := range m.Parts {
		if p.Type != channels.PartAudio || p.Voice || !strings.HasPrefix(p.MIME, "audio/") {
			t.Errorf("attached %s arrived as %s %s (voice %v); want audio", p.Name, p.Type, p.MIME, p.Voice)
		}
	}
}
