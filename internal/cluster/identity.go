package cluster

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// defaultNodeID is Config.NodeID's default, made once per process: the
// pid tells apart the processes of one host, the random suffix the
// containers that share a hostname and a pid (1).
var defaultNodeID = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", cmp.Or(h, "sluice"), os.Getpid(), randomHex(3))
})
