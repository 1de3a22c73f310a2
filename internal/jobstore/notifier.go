package jobstore

import (
	"context"
	"sync"
)

// notifier fans work signals out to Notify subscribers. Sends never block:
// each subscriber has a one-slot channel, so signals coalesce.
type notifier struct {
	mu     sync.Mutex
	subs   map[string]map[chan struct{}]struct{} // by upstream; "" = any
	closed bool
}

func newNotifier() *notifier {
	return &notifier{subs: map[string]map[chan struct{}]struct{}{}}
}

func (n *notifier) subscribe(ctx context.Context, upstream string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		close(ch)
		return ch
	}
	set := n.subs[upstream]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		n.subs[upstream] = set
	}
	set[ch] = struct{}{}
	context.AfterFunc(ctx, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if _, ok := n.subs[upstream][ch]; ok {
			delete(n.subs[upstream], ch)
			close(ch)
		}
	})
	return ch
}

// signal wakes the subscribers of upstream and of every upstream ("").
// An empty upstream wakes everyone.
func (n *notifier) signal(upstream string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if upstream == "" {
		for _, set := range n.subs {
			poke(set)
		}
		return
	}
	poke(n.subs[upstream])
	poke(n.subs[""])
}

func poke(set map[chan struct{}]struct{}) {
	for ch := range set {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close ends every subscription.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for _, set := range n.subs {
		for ch := range set {
			close(ch)
		}
	}
	n.subs = map[string]map[chan struct{}]struct{}{}
}
