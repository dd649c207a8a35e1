package auth

import "strings"

// BearerToken extracts the token from an Authorization header value (also the
// websocket connection_init payload's "Authorization"): "Bearer <token>",
// scheme case-insensitive (RFC 9110 §11.1), surrounding spaces ignored. It
// reports false for any other scheme, an empty token, or a token with
// characters outside RFC 6750's b64token alphabet; rejecting those here keeps
// junk (and log-hostile bytes) away from the JWT parser.
func BearerToken(headerValue string) (string, bool) {
	v := strings.Trim(headerValue, " \t")
	sp := strings.IndexAny(v, " \t")
	if sp < 0 || !strings.EqualFold(v[:sp], "Bearer") {
		return "", false
	}
	tok := strings.Trim(v[sp:], " \t")
	if tok == "" || len(tok) > MaxTokenLen || !isB64Token(tok) {
		return "", false
	}
	return tok, true
}

// isB64Token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/') {
			break
		}
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
