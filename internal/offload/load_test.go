package offload

import "testing"

func TestLoadSmoke(t *testing.T) {
	e, err := Load(Config{ListenPorts: []uint16{3478}, RelayPortMin: 49152, RelayPortMax: 65535})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
}
