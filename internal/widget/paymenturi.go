package widget

import (
	"net/url"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/money"
)

// PaymentURI is the URI a wallet pays from (the page's QR code and
// data-payment-uri):
//   - an EVM token, EIP-681: ethereum:<token>@<chainId>/transfer?address=<payee>&uint256=<atomic>
//   - an EVM native currency: ethereum:<payee>@<chainId>?value=<wei>
//   - Solana Pay (a transfer request): solana:<payee>?amount=<amount>
//     [&spl-token=<mint>][&reference=<key>] (no spl-token for SOL; the
//     checkout's reference key when it has one, which the wallet adds to
//     the transfer so the watcher finds the payment by it)
//
// amount is the voucher's canonical decimal; atomic units are exact
// (decimal shifted by the token's decimals, never a float). "" when the
// amount cannot be read (never for a stored voucher).
func PaymentURI(networkType, chainID string, native bool, currencyAddress, payee, amount string, decimals int32, reference string) string {
	d, err := money.Parse(amount, decimals)
	if err != nil {
		return ""
	}
	switch networkType {
	case chain.TypeEVM:
		atomic := d.Shift(decimals).BigInt().String()
		if native {
			return "ethereum:" + payee + "@" + chainID + "?value=" + atomic
		}
		return "ethereum:" + currencyAddress + "@" + chainID + "/transfer?address=" + payee + "&uint256=" + atomic
	case chain.TypeSolana:
		u := "solana:" + payee + "?amount=" + url.QueryEscape(d.String())
		if !native {
			u += "&spl-token=" + url.QueryEscape(currencyAddress)
		}
		if reference != "" {
			u += "&reference=" + url.QueryEscape(reference)
		}
		return u
	}
	return ""
}

// atomicAmount is amount in the token's smallest unit ("" if unreadable).
func atomicAmount(amount string, decimals int32) string {
	d, err := money.Parse(amount, decimals)
	if err != nil {
		return ""
	}
	return d.Shift(decimals).BigInt().String()
}
