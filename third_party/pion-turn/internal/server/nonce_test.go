// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNonceHash(t *testing.T) {
	t.Run("generated hashes validate", func(t *testing.T) {
		h, err := NewNonceHash()
		assert.NoError(t, err)
		nonce, err := h.Generate()
		assert.NoError(t, err)
		assert.NoError(t, h.Validate(nonce))
	})

	t.Run("generated short hashes validate", func(t *testing.T) {
		for i := 1; i <= 8; i++ {
			h, err := NewShortNonceHash(i * 4)
			assert.NoError(t, err, fmt.Sprintf("nonce init at size %d", i*4))
			nonce, err := h.Generate()
			assert.NoError(t, err, fmt.Sprintf("generate at size %d", i*4))
			assert.NoError(t, h.Validate(nonce), fmt.Sprintf("decode at size %d", i*4))
		}
	})
}

func TestShortNonceHashLifetime(t *testing.T) {
	newHash := func(t *testing.T, lifetime time.Duration, now *time.Time) *ShortNonceHash {
		t.Helper()
		manager, err := NewShortNonceHashWithLifetime(0, lifetime)
		require.NoError(t, err)
		h, ok := manager.(*ShortNonceHash)
		require.True(t, ok)
		h.now = func() time.Time { return *now }

		return h
	}

	t.Run("default is one hour", func(t *testing.T) {
		manager, err := NewShortNonceHash(0)
		require.NoError(t, err)
		h, ok := manager.(*ShortNonceHash)
		require.True(t, ok)
		assert.Equal(t, time.Hour, h.lifetime)

		now := time.Unix(1700000000, 0)
		h = newHash(t, 0, &now)
		assert.Equal(t, time.Hour, h.lifetime)
		nonce, err := h.Generate()
		require.NoError(t, err)
		now = now.Add(time.Hour)
		assert.NoError(t, h.Validate(nonce))
		now = now.Add(time.Second)
		assert.ErrorIs(t, h.Validate(nonce), errInvalidNonce)
	})

	t.Run("valid before lifetime and invalid after", func(t *testing.T) {
		start := time.Unix(1700000000, 0)
		now := start
		h := newHash(t, 5*time.Second, &now)
		nonce, err := h.Generate()
		require.NoError(t, err)

		for _, age := range []time.Duration{0, time.Second, 4 * time.Second, 5 * time.Second} {
			now = start.Add(age)
			assert.NoError(t, h.Validate(nonce), "age %v", age)
		}
		for _, age := range []time.Duration{6 * time.Second, time.Minute, 2 * time.Hour} {
			now = start.Add(age)
			assert.ErrorIs(t, h.Validate(nonce), errInvalidNonce, "age %v", age)
		}
	})

	t.Run("nonce from the future is invalid", func(t *testing.T) {
		now := time.Unix(1700000000, 0)
		h := newHash(t, time.Hour, &now)
		nonce, err := h.Generate()
		require.NoError(t, err)
		now = now.Add(-time.Second)
		assert.ErrorIs(t, h.Validate(nonce), errInvalidNonce)
	})

	t.Run("timestamp after 2106", func(t *testing.T) {
		// Seconds since the Unix epoch no longer fit in 4 bytes.
		now := time.Date(2200, time.January, 1, 0, 0, 0, 0, time.UTC)
		h := newHash(t, time.Minute, &now)
		nonce, err := h.Generate()
		require.NoError(t, err)
		assert.NoError(t, h.Validate(nonce))
		now = now.Add(61 * time.Second)
		assert.ErrorIs(t, h.Validate(nonce), errInvalidNonce)
	})

	t.Run("tampered timestamp is invalid", func(t *testing.T) {
		now := time.Unix(1700000000, 0)
		h := newHash(t, time.Hour, &now)
		nonce, err := h.Generate()
		require.NoError(t, err)
		raw := decodeBase36(nonce)
		raw[len(raw)-h.hmacLen-1]++ // last byte of the timestamp
		assert.ErrorIs(t, h.Validate(encodeBase36(raw)), errInvalidNonce)
	})

	t.Run("negative lifetime", func(t *testing.T) {
		_, err := NewShortNonceHashWithLifetime(0, -time.Second)
		assert.ErrorIs(t, err, errInvalidNonceLifetime)
	})
}
