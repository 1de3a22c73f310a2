package dispatch

import (
	"cmp"
	"errors"
	"io"
)

// errAbandoned is what a Read returns once its reader closed the stream.
var errAbandoned = errors.New("stream closed by its reader")

// errDrainBound ends the reading of an abandoned stream at
// AbandonedDrainBytes.
var errDrainBound = errors.New("abandoned stream read to its byte bound")

// AbandonedDrainBytes bounds what the engine reads of a stream its client
// left (with the upstream's abandoned_stream_drain).
const AbandonedDrainBytes = 8 << 20

// pumpBufferSize is the pump's read size: a few events of a stream.
const pumpBufferSize = 16 << 10

// startPump gives b its pipe and starts the goroutine that reads the
// upstream stream. A reader's Read never waits on the upstream itself, so
// a reader that leaves (Close, its context) is never held by a silent
// provider, while the stream is read on to its usage.
func (b *trackedBody) startPump() {
	b.pr, b.pw = io.Pipe()
	b.pumpDone = make(chan struct{})
	go b.pump()
}

// pump reads the upstream stream to its end, feeding the stream's
// observer and handing each chunk to the reader through the pipe. Once the
// reader left (abandoned) it reads on, bounded in bytes here and in time
// by closeStream's timer, then finishes the stream: with the provider's
// usage when it got to it, else charged its worst case (finish).
func (b *trackedBody) pump() {
	defer close(b.pumpDone)
	buf := make([]byte, pumpBufferSize)
	drained := 0
	var err error
	for err == nil {
		var n int
		n, err = b.upstream.Read(buf)
		b.mu.Lock()
		if n > 0 && !b.finished {
			_, _ = b.so.Write(buf[:n])
		}
		abandoned := b.abandoned
		b.mu.Unlock()
		if abandoned {
			if drained += n; err == nil && drained > AbandonedDrainBytes {
				err = errDrainBound
			}
			continue
		}
		if n > 0 {
			// An error means the reader closed its end (closeStream, cut):
			// what follows is decided there; the loop reads on.
			_, _ = b.pw.Write(buf[:n])
		}
	}
	_ = b.upstream.Close()
	b.mu.Lock()
	if b.cutErr != nil {
		err = b.cutErr
	}
	if b.abandoned {
		b.finish(errors.Is(err, io.EOF) && b.so.Done(), nil)
	} else {
		b.finish(errors.Is(err, io.EOF), err)
	}
	b.mu.Unlock()
	if errors.Is(err, io.EOF) {
		_ = b.pw.Close()
	} else {
		_ = b.pw.CloseWithError(err)
	}
}

// readStream is Read for a stream: the bytes the engine read ahead, then
// the pump's.
func (b *trackedBody) readStream(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errAbandoned
	}
	if len(b.replay) > 0 {
		n := copy(p, b.replay)
		b.replay = b.replay[n:]
		b.mu.Unlock()
		return n, nil
	}
	b.mu.Unlock()
	n, err := b.pr.Read(p)
	if errors.Is(err, io.ErrClosedPipe) {
		// The reader's side was closed under it: by a cut, or by Close.
		b.mu.Lock()
		err = cmp.Or(b.cutErr, errAbandoned)
		b.mu.Unlock()
	}
	return n, err
}

// closeStream is Close for a stream. Before its end, the reader's side is
// closed at once (a Read waiting returns) and the pump reads on, for up to
// abandoned_stream_drain (then the upstream is closed under it); with the
// drain off, or a stream cut by Stop, the upstream is closed now and
// closeStream returns once the stream is finished.
func (b *trackedBody) closeStream() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	drain := !b.finished && b.cutErr == nil && b.d.cfg.AbandonedStreamDrain > 0
	if !b.finished && b.cutErr == nil {
		b.abandoned = true // drained, or cut at once: charged its worst case
	}
	b.mu.Unlock()
	_ = b.pr.CloseWithError(errAbandoned)
	if drain {
		go b.boundDrain()
		return nil
	}
	err := b.upstream.Close()
	<-b.pumpDone
	return err
}

// boundDrain closes an abandoned stream's upstream once its
// abandoned_stream_drain is over, unless the pump finished first.
func (b *trackedBody) boundDrain() {
	t := b.d.clk.NewTimer(b.d.cfg.AbandonedStreamDrain)
	defer t.Stop()
	select {
	case <-t.C():
		_ = b.upstream.Close()
	case <-b.pumpDone:
	}
}
