package widget

import (
	"crypto/ed25519"
	"crypto/rand"

	"github.com/voucherd/voucherd/internal/chain"
)

// newSolanaPayReference draws a checkout's Solana Pay reference: the public
// key of a fresh ed25519 key pair, base58. The payer's wallet adds it to
// the transfer as a read-only account (it is in the checkout's paymentUri),
// so the node lists the payment under it (getSignaturesForAddress) and the
// settlement watcher finds the payment no one reported. Only the public
// key is kept: the private half is dropped at once, and nothing can sign
// for the reference (it never needs to: it only names the checkout).
// 256 random bits: no two checkouts share one.
func newSolanaPayReference() (string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	return chain.EncodeBase58(pub), nil
}
