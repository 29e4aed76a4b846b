package gateway

import (
	"strconv"
	"testing"
	"time"

	"gateway/harness"
)

// BenchmarkPipelineWeb is one web chat user over a real WebSocket: send a message, wait
// for its done frame, again. One op is one message through the whole pipeline (receive
// hooks, session actor, harness with its durable history, fake model, frames back).
func BenchmarkPipelineWeb(b *testing.B) {
	e := newEnv(b)
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply { return harness.FakeReply{Text: "ok"} })
	c := e.client(b, "bench")
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		c.say("hello")
		if fs := c.until("done", "error"); fs[len(fs)-1].Type != "done" {
			b.Fatalf("answer ended with %+v", fs[len(fs)-1])
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkPipelineMem is 100 chats at once over the in-memory channel, each sending its
// next message as soon as the previous one is answered. One op is one message; ns/op is
// wall time per message with 100 in flight.
func BenchmarkPipelineMem(b *testing.B) {
	e := newEnv(b)
	e.fake.SetFunc(func(*harness.Request) harness.FakeReply { return harness.FakeReply{Text: "ok"} })
	const chats = 100
	sent := 0
	send := func(chat string) {
		sent++
		e.mem.inject(b, chat, strconv.Itoa(sent), "hello")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for c := 0; c < chats && sent < b.N; c++ {
		send("c" + strconv.Itoa(c))
	}
	for range b.N {
		select {
		case chat := <-e.mem.done:
			if sent < b.N {
				send(chat)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("no answer within 30s (%d sent)", sent)
		}
	}
	b.StopTimer()
	for c := range chats {
		for _, f := range e.mem.finals("c" + strconv.Itoa(c)) {
			if f != "done:ok" {
				b.Fatalf("chat c%d got %q", c, f)
			}
		}
	}
}
