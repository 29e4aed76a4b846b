package audio

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"time"
)

// oggOpusInfo reads the duration of an Ogg/Opus file from its pages, without running a
// program: voice notes are nearly always Ogg/Opus, and ffprobe's start-up dominates the
// cost of handling one. ok is false when the file is not a plain single-stream Ogg/Opus
// file it can read; the caller then asks ffprobe.
func oggOpusInfo(path string) (info Info, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, false
	}
	defer f.Close()
	head := make([]byte, 27+255+19)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if !IsOggOpus(head) {
		return Info{}, false
	}
	serial := head[14:18]
	op := head[27+int(head[26]):]
	if len(op) < 19 {
		return Info{}, false
	}
	channels := int(op[9])
	preSkip := int64(binary.LittleEndian.Uint16(op[10:12]))

	// The last page's granule position counts 48 kHz samples from the start.
	st, err := f.Stat()
	if err != nil {
		return Info{}, false
	}
	const maxPage = 27 + 255 + 255*255
	off := max(st.Size()-maxPage, 0)
	tail := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(tail, off); err != nil && err != io.EOF {
		return Info{}, false
	}
	for i := bytes.LastIndex(tail, []byte("OggS")); i >= 0; i = bytes.LastIndex(tail[:i], []byte("OggS")) {
		p := tail[i:]
		if len(p) < 27 || p[4] != 0 {
			continue
		}
		granule := int64(binary.LittleEndian.Uint64(p[6:14]))
		if granule < 0 { // -1: no packet ends on this page
			continue
		}
		if !bytes.Equal(p[14:18], serial) || granule <= preSkip {
			return Info{}, false // chained streams or nothing decodable: let ffprobe judge
		}
		d := time.Duration((granule - preSkip) * int64(time.Second) / 48000)
		return Info{Format: "ogg", Codec: "opus", Duration: d, SampleRate: 48000, Channels: channels}, true
	}
	return Info{}, false
}
