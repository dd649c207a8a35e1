package rest

import (
	"net/http"
	"strconv"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
)

// voucherRoutes are the voucher lifecycle and the finance reads (guards and
// rate groups: internal/operation). The service decides who may act on a
// voucher (payee, payer, business members) and answers not_found to
// everyone else.
func (s *server) voucherRoutes() {
	s.route(operation.ReserveVoucher, s.reserveVoucher)
	s.route(operation.QueryVouchers, s.queryVouchers)
	s.route(operation.GetVoucher, s.getVoucher)
	s.route(operation.RedeemVoucher, s.redeemVoucher)
	s.route(operation.NegotiateVoucher, s.negotiateVoucher)
	s.route(operation.ResolveVoucher, s.resolveVoucher)
	s.route(operation.DiscardVoucher, s.discardVoucher)
	s.route(operation.InteropInit, s.interopInit)

	s.route(operation.Currencies, s.currencies)
	s.route(operation.Rates, s.rates)
}

func (s *server) reserveVoucher(w http.ResponseWriter, r *http.Request) error {
	var in voucher.ReserveInput
	if err := decode(r, &in); err != nil {
		return err
	}
	ctx, stamp := voucher.WithCommitStamp(r.Context())
	v, err := s.Vouchers.Reserve(ctx, in)
	if err != nil {
		return err
	}
	return changed(w, stamp, view.OfVoucher(v))
}

// changed answers a voucher change with its view, and the instant it
// committed in a Server-Timing header (voucher.CommitStamp): a client on
// the same machine (the bench) can measure from the commit itself.
func changed(w http.ResponseWriter, stamp *voucher.CommitStamp, v *view.Voucher) error {
	if st := stamp.ServerTiming(); st != "" {
		w.Header()["Server-Timing"] = []string{st}
	}
	return ok(w, v)
}

// decodeFor decodes a body for op on the path's voucher. A body that does
// not decode is still answered not_found for a caller who may not act on
// the voucher: visibility comes before the body.
func (s *server) decodeFor(r *http.Request, op voucher.Op, dst any, allowEmpty bool) error {
	if err := httpx.DecodeJSON(r, dst, allowEmpty); err != nil {
		return s.Vouchers.Reject(r.Context(), op, r.PathValue("voucherId"), err)
	}
	return nil
}

func (s *server) redeemVoucher(w http.ResponseWriter, r *http.Request) error {
	var in voucher.RedeemInput
	if err := s.decodeFor(r, voucher.OpRedeem, &in, false); err != nil {
		return err
	}
	ctx, stamp := voucher.WithCommitStamp(r.Context())
	v, err := s.Vouchers.Redeem(ctx, r.PathValue("voucherId"), in)
	if err != nil {
		return err
	}
	return changed(w, stamp, view.OfVoucher(v))
}

func (s *server) negotiateVoucher(w http.ResponseWriter, r *http.Request) error {
	var in voucher.NegotiateInput
	if err := s.decodeFor(r, voucher.OpNegotiate, &in, false); err != nil {
		return err
	}
	ctx, stamp := voucher.WithCommitStamp(r.Context())
	v, err := s.Vouchers.Negotiate(ctx, r.PathValue("voucherId"), in)
	if err != nil {
		return err
	}
	return changed(w, stamp, view.OfVoucher(v))
}

func (s *server) resolveVoucher(w http.ResponseWriter, r *http.Request) error {
	var in voucher.ResolveInput
	if err := s.decodeFor(r, voucher.OpResolve, &in, false); err != nil {
		return err
	}
	ctx, stamp := voucher.WithCommitStamp(r.Context())
	v, err := s.Vouchers.Resolve(ctx, r.PathValue("voucherId"), in)
	if err != nil {
		return err
	}
	return changed(w, stamp, view.OfVoucher(v))
}

func (s *server) discardVoucher(w http.ResponseWriter, r *http.Request) error {
	var empty struct{}
	if err := s.decodeFor(r, voucher.OpDiscard, &empty, true); err != nil {
		return err
	}
	ctx, stamp := voucher.WithCommitStamp(r.Context())
	v, err := s.Vouchers.Discard(ctx, r.PathValue("voucherId"))
	if err != nil {
		return err
	}
	return changed(w, stamp, view.OfVoucher(v))
}

func (s *server) getVoucher(w http.ResponseWriter, r *http.Request) error {
	v, err := s.Vouchers.Get(r.Context(), r.PathValue("voucherId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfVoucher(v))
}

func (s *server) queryVouchers(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := voucher.Filter{Code: q.Get("code"), SessionID: q.Get("sessionId"), Status: q.Get("status")}
	var v apperr.Validator
	limit := intParam(&v, q.Get("limit"), "limit")
	offset := intParam(&v, q.Get("offset"), "offset")
	if err := v.Err(); err != nil {
		return err
	}
	// One answer names every fault of the filter and the page.
	f.Check(&v)
	page := paging.VoucherRows.Check(&v, limit, offset)
	if err := v.Err(); err != nil {
		return err
	}
	list, err := s.Vouchers.List(r.Context(), f)
	if err != nil {
		return err
	}
	vs, err := paging.Rows(r.Context(), list.Order(voucher.NewestFirst...), page)
	if err != nil {
		return err
	}
	return ok(w, view.List(vs, view.OfVoucher))
}

// intParam parses an optional integer query parameter ("" is absent).
func intParam(v *apperr.Validator, s, name string) *int {
	if s == "" {
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		v.Add(name, "must be an integer")
		return nil
	}
	return &n
}

func (s *server) interopInit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var in voucher.InteropInitInput
	var body struct {
		Signature *string `json:"signature"`
	}
	if err := s.decodeFor(r, voucher.OpInteropInit, &body, true); err != nil {
		return err
	}
	in.ID, in.Signature = q.Get("id"), body.Signature
	if q.Has("vid") {
		vid := q.Get("vid")
		in.Vid = &vid
	}
	var v apperr.Validator
	in.PaymentIndex = intParam(&v, q.Get("paymentIndex"), "paymentIndex")
	if err := v.Err(); err != nil {
		return s.Vouchers.Reject(r.Context(), voucher.OpInteropInit, r.PathValue("voucherId"), err)
	}
	sub, err := s.Vouchers.InteropInit(r.Context(), r.PathValue("voucherId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfSubmission(sub))
}

func (s *server) currencies(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Finance.Currencies(r.Context(), r.URL.Query().Get("network"))
	if err != nil {
		return err
	}
	return ok(w, view.List(list, view.OfCurrency))
}

func (s *server) rates(w http.ResponseWriter, r *http.Request) error {
	rates, err := s.Finance.Rates(r.Context())
	if err != nil {
		return err
	}
	return ok(w, view.OfRates(rates))
}
