package frontdoor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRewriteModel(t *testing.T) {
	t.Parallel()
	m := map[string]string{"a": "b"}
	require.JSONEq(t, `{"model":"b","x":1}`, string(RewriteModel([]byte(`{"model":"a","x":1}`), m)))
	require.Equal(t, `{"model":"c"}`, string(RewriteModel([]byte(`{"model":"c"}`), m)))
	require.Equal(t, `not json`, string(RewriteModel([]byte(`not json`), m)))
}
