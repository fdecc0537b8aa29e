// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// NonceManager interface that both implementations satisfy.
type NonceManager interface {
	Generate() (string, error)
	Validate(nonce string) error
}

const (
	shortNonceLifetime     = time.Hour // Same as original
	shortNonceKeyLength    = 64        // Same as original
	shortNonceTimestampLen = 5         // 5 bytes for timestamp (seconds)
	shortNonceMinHMACLen   = 2         // Minimum HMAC length for security
	shortNonceMaxHMACLen   = 32        // Maximum HMAC length (full SHA256)
	defaultNonceHMACLen    = 12        // Default HMAC length
)

// NewShortNonceHash creates a ShortNonceHash whose nonces stay valid for one hour. The hmacLen
// argument specifies the number of HMAC bytes to include (2-32 bytes).  The total nonce size will
// be 5 + hmacLen bytes, default hmaclen is 12 bytes. The 5 bytes timestamp counts seconds since the
// Unix epoch and gives about ~34,000 years before nonces would start to repeat.
func NewShortNonceHash(hmacLen int) (NonceManager, error) {
	return NewShortNonceHashWithLifetime(hmacLen, shortNonceLifetime)
}

// NewShortNonceHashWithLifetime creates a ShortNonceHash whose nonces stay valid for lifetime,
// with a resolution of one second. A zero lifetime defaults to one hour. See NewShortNonceHash
// for hmacLen.
func NewShortNonceHashWithLifetime(hmacLen int, lifetime time.Duration) (NonceManager, error) {
	if hmacLen == 0 {
		hmacLen = defaultNonceHMACLen
	}

	if hmacLen < shortNonceMinHMACLen || hmacLen > shortNonceMaxHMACLen {
		return nil, errFailedToGenerateNonce
	}

	if lifetime == 0 {
		lifetime = shortNonceLifetime
	} else if lifetime < 0 {
		return nil, errInvalidNonceLifetime
	}

	key := make([]byte, shortNonceKeyLength)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("%w: %w", errFailedToGenerateNonce, err)
	}

	return &ShortNonceHash{
		key:      key,
		hmacLen:  hmacLen,
		lifetime: lifetime,
		now:      time.Now,
	}, nil
}

// ShortNonceHash is used to create and verify short nonces.
type ShortNonceHash struct {
	key      []byte
	hmacLen  int
	lifetime time.Duration
	now      func() time.Time
}

// Generate a short nonce (5 + hmacLen bytes encoded as base36).
func (s *ShortNonceHash) Generate() (string, error) {
	timestampSeconds := s.now().Unix()

	// Convert to bytes and trim to 5 bytes.  This safely handles the conversion since we know
	// current values fit in 5 bytes for the next ~34,000 years.
	timestampBytes8 := make([]byte, 8)
	binary.BigEndian.PutUint64(timestampBytes8, uint64(timestampSeconds)) // nolint:gosec // G115
	timestampBytes := timestampBytes8[8-shortNonceTimestampLen:]

	hash := hmac.New(sha256.New, s.key)
	if _, err := hash.Write(timestampBytes); err != nil {
		return "", fmt.Errorf("%w: %w", errFailedToGenerateNonce, err)
	}
	fullHMAC := hash.Sum(nil)
	truncatedHMAC := fullHMAC[:s.hmacLen]

	totalLen := shortNonceTimestampLen + s.hmacLen
	nonce := make([]byte, totalLen)
	copy(nonce[:shortNonceTimestampLen], timestampBytes)
	copy(nonce[shortNonceTimestampLen:], truncatedHMAC)

	return encodeBase36(nonce), nil
}

// Validate checks that nonce is signed and is not expired.
func (s *ShortNonceHash) Validate(nonce string) error {
	nonceBytes := decodeBase36(nonce)
	if nonceBytes == nil {
		return errInvalidNonce
	}

	expectedLen := shortNonceTimestampLen + s.hmacLen
	if len(nonceBytes) != expectedLen {
		// Pad with leadnign zeros if leading zeros were stripped during encoding/decoding.
		if len(nonceBytes) < expectedLen {
			padded := make([]byte, expectedLen)
			copy(padded[expectedLen-len(nonceBytes):], nonceBytes)
			nonceBytes = padded
		} else {
			return errInvalidNonce
		}
	}

	timestampBytes := nonceBytes[:shortNonceTimestampLen]
	receivedHMAC := nonceBytes[shortNonceTimestampLen:]
	timestampBytes8 := make([]byte, 8)
	copy(timestampBytes8[8-shortNonceTimestampLen:], timestampBytes)
	timestampSeconds := int64(binary.BigEndian.Uint64(timestampBytes8)) // nolint:gosec // G115

	// Check if nonce is from the future or expired (older than its lifetime).
	ageSeconds := s.now().Unix() - timestampSeconds
	if ageSeconds < 0 || ageSeconds > int64(s.lifetime/time.Second) {
		return errInvalidNonce
	}

	// Recompute HMAC and compare.
	hash := hmac.New(sha256.New, s.key)
	if _, err := hash.Write(timestampBytes); err != nil {
		return fmt.Errorf("%w: %w", errInvalidNonce, err)
	}

	expectedHMAC := hash.Sum(nil)[:s.hmacLen]

	if !hmac.Equal(receivedHMAC, expectedHMAC) {
		return errInvalidNonce
	}

	return nil
}
