package webhook_test

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/webhook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSecretFormats(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":1}`)
	tests := []struct {
		name, secret string
		err          bool
	}{
		{"plain string is the key", "s3cret", false},
		{"whsec_ is base64 after the prefix", "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")), false},
		{"whsec_ that is not base64", "whsec_!!!", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wh, err := webhook.NewSigner(tt.secret)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			now := time.Now()
			sig, err := wh.Sign("msg_1", now, body)
			require.NoError(t, err)
			h := http.Header{}
			h.Set(webhook.HeaderID, "msg_1")
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
			h.Set(webhook.HeaderSignature, sig)
			require.NoError(t, wh.Verify(body, h))
			require.Error(t, wh.Verify([]byte(`{"id":2}`), h), "another body does not verify")
		})
	}
}

func TestLegacySignature(t *testing.T) {
	t.Parallel()
	body := []byte("x")
	sig := webhook.Sign("k", body)
	require.True(t, webhook.VerifySignature("k", body, sig))
	require.False(t, webhook.VerifySignature("other", body, sig))
	require.Regexp(t, `^sha256=[0-9a-f]{64}$`, sig)
}
