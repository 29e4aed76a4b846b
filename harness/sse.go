package harness

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// errStreamCut is a model's event stream that ended, without an error, before the event
// that closes an answer ("[DONE]", "message_stop") and before any stop reason: the server
// or a proxy hung up midway. The answer is then incomplete and must not pass for a whole
// one; the call is made again if nothing of it was shown yet, as for a broken connection.
var errStreamCut = errors.New("the model's stream ended before the answer was complete")

// sseReadBuffer is the read buffer of a model's event stream. A chunk's line is a few
// hundred bytes; a longer line is gathered across reads.
const sseReadBuffer = 1 << 10

// sseMaxLine bounds one line of an event stream, as the SDK's decoder does (its
// bufio.Scanner's limit).
const sseMaxLine = bufio.MaxScanTokenSize << 9

// sseDecoder reads text/event-stream as ssestream's own decoder does (the same lines,
// fields and events; each data line followed by '\n' in Data), with less garbage per
// answer: a 1 KB read buffer rather than its scanner's 4 KB, and one data buffer reused
// from event to event rather than a new one grown for each chunk. Reuse is safe because
// the reader decodes an event before it asks for the next.
type sseDecoder struct {
	rc   io.ReadCloser
	r    *bufio.Reader
	line []byte // a line longer than r's buffer, gathered
	data []byte
	evt  ssestream.Event
	err  error
}

// newSSEDecoder reads res's body as an event stream.
func newSSEDecoder(res *http.Response) *sseDecoder {
	return &sseDecoder{rc: res.Body, r: bufio.NewReaderSize(res.Body, sseReadBuffer)}
}

func (d *sseDecoder) Next() bool {
	if d.err != nil {
		return false
	}
	event := ""
	d.data = d.data[:0]
	for {
		txt, ok := d.readLine()
		if !ok {
			return false
		}
		// An empty line dispatches the event.
		if len(txt) == 0 {
			if len(d.data) == 0 {
				event = ""
				continue
			}
			d.evt = ssestream.Event{Type: event, Data: d.data}
			return true
		}
		// "event: bar" is name "event" and value "bar"; one space after the colon is
		// not part of the value.
		name, value, _ := bytes.Cut(txt, []byte(":"))
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "": // ": something" is a comment
		case "event":
			event = string(value)
		case "data":
			d.data = append(d.data, value...)
			d.data = append(d.data, '\n')
		}
	}
}

// readLine returns the next line without its "\n" or "\r\n", as bufio.ScanLines does
// (a last line without a newline included); false at the end of the stream or on an
// error, kept for Err.
func (d *sseDecoder) readLine() ([]byte, bool) {
	d.line = d.line[:0]
	for {
		b, err := d.r.ReadSlice('\n')
		switch {
		case err == bufio.ErrBufferFull:
			if len(d.line)+len(b) > sseMaxLine {
				d.err = bufio.ErrTooLong
				return nil, false
			}
			d.line = append(d.line, b...)
			continue
		case err != nil && err != io.EOF:
			d.err = err
			return nil, false
		}
		line := b
		if len(d.line) > 0 {
			d.line = append(d.line, b...)
			line = d.line
		}
		if err == io.EOF && len(line) == 0 {
			return nil, false
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), true
	}
}

func (d *sseDecoder) Event() ssestream.Event { return d.evt }
func (d *sseDecoder) Close() error           { return d.rc.Close() }
func (d *sseDecoder) Err() error             { return d.err }
