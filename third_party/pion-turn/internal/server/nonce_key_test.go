// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

package server

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSetNonceKey(t *testing.T) {
	newHash := func(key []byte) NonceManager {
		t.Helper()
		m, err := NewShortNonceHash(0)
		assert.NoError(t, err)
		if key != nil {
			assert.NoError(t, SetNonceKey(m, key))
		}

		return m
	}
	key := bytes.Repeat([]byte{7}, MinNonceKeyLength)
	a, b := newHash(key), newHash(key)
	nonce, err := a.Generate()
	assert.NoError(t, err)
	assert.NoError(t, b.Validate(nonce), "a server with the same key accepts the nonce")
	assert.Error(t, newHash(nil).Validate(nonce), "a server with its own random key refuses it")
	assert.Error(t, newHash(bytes.Repeat([]byte{8}, MinNonceKeyLength)).Validate(nonce), "another key refuses it")

	assert.ErrorIs(t, SetNonceKey(newHash(nil), key[:MinNonceKeyLength-1]), errNonceKeyTooShort)
	legacy, err := NewNonceHash()
	assert.NoError(t, err)
	assert.ErrorIs(t, SetNonceKey(legacy, key), errNonceKeyUnsupported)
}
