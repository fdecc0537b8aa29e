// SPDX-FileCopyrightText: 2026 The Pion community <https://pion.ly>
// SPDX-License-Identifier: MIT

package server

import (
	"bytes"
	"errors"
)

// MinNonceKeyLength is the shortest key SetNonceKey takes: a shorter one
// would make nonces guessable.
const MinNonceKeyLength = 16

var (
	errNonceKeyTooShort    = errors.New("nonce key is shorter than 16 bytes")
	errNonceKeyUnsupported = errors.New("nonce manager does not take a key")
)

// SetNonceKey makes a ShortNonceHash sign and check nonces with key instead
// of the random key it drew. Servers sharing a key accept each other's nonces.
func SetNonceKey(m NonceManager, key []byte) error {
	if len(key) < MinNonceKeyLength {
		return errNonceKeyTooShort
	}
	s, ok := m.(*ShortNonceHash)
	if !ok {
		return errNonceKeyUnsupported
	}
	s.key = bytes.Clone(key)

	return nil
}
