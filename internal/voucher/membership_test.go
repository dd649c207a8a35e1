package voucher_test

import (
	"context"
	"testing"

	"github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/revocation"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

// A member made INACTIVE loses every role on the business's vouchers, the
// payee role on the ones it reserved included: it can no longer read,
// redeem, choose the payout wallet of, or discard them (404), and its
// lists no longer show them (docs/hardening.md).
func TestInactiveMemberLosesPayeeRole(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		owner, member := f.user(), f.user()
		shop := f.business(owner, business.StatusACTIVE)
		f.member(shop, member, businessuser.StatusACTIVE)
		payer := device()
		ses, _ := f.session(payer)
		reserved, err := f.svc.Reserve(as(member), voucher.ReserveInput{Code: ses.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		ses2, _ := f.session(payer)
		redeemed, err := f.svc.Reserve(as(member), voucher.ReserveInput{Code: ses2.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		if redeemed, err = f.svc.Redeem(as(member), redeemed.ID, simpleBody("5")); err != nil {
			t.Fatal(err)
		}
		// Its own voucher without a business stays its own.
		ses3, _ := f.session(payer)
		own, err := f.svc.Reserve(as(member), voucher.ReserveInput{Code: ses3.Code})
		if err != nil {
			t.Fatal(err)
		}

		if _, err := db.BusinessUser.Update().
			Where(businessuser.BusinessID(shop.ID), businessuser.UserID(member.ID)).
			SetStatus(businessuser.StatusINACTIVE).Save(ctx); err != nil {
			t.Fatal(err)
		}
		before := f.row(reserved.ID)
		_, err = f.svc.Get(as(member), reserved.ID)
		wantCode(t, err, apperr.NotFound)
		_, err = f.svc.Redeem(as(member), reserved.ID, simpleBody("5"))
		wantCode(t, err, apperr.NotFound)
		wantCode(t, f.svc.Reject(as(member), voucher.OpRedeem, reserved.ID, apperr.Invalid("x", "y")), apperr.NotFound)
		_, err = f.svc.Discard(as(member), redeemed.ID)
		wantCode(t, err, apperr.NotFound)
		f.unchanged(reserved.ID, before)
		if ok, err := f.svc.Visible(ctx, member, reserved); err != nil || ok {
			t.Fatalf("visible to the former member: %v %v", ok, err)
		}
		// The one list both doors page (REST's list, GraphQL's vouchers).
		list, err := query(as(member), f.svc, voucher.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != own.ID {
			t.Fatalf("the former member lists %d vouchers, want only its own", len(list))
		}
		// Its own voucher, the payer and the owner are unaffected.
		f.mustGet(member, own.ID)
		f.mustGet(payer, reserved.ID)
		f.mustGet(owner, reserved.ID)

		// Made ACTIVE again, it is the payee again.
		if _, err := db.BusinessUser.Update().
			Where(businessuser.BusinessID(shop.ID), businessuser.UserID(member.ID)).
			SetStatus(businessuser.StatusACTIVE).Save(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Redeem(as(member), reserved.ID, simpleBody("5")); err != nil {
			t.Fatal(err)
		}
	})
}

// On an INACTIVE business, redeem and negotiate of its vouchers are
// business_inactive; resolve and discard stay allowed (the payer may have
// paid).
func TestInactiveBusinessStopsRedeemAndNegotiate(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)
		payer := device()
		reserve := func() string {
			ses, _ := f.session(payer)
			v, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: ses.Code, BusinessID: &shop.ID})
			if err != nil {
				t.Fatal(err)
			}
			return v.ID
		}
		toRedeem, toDiscard := reserve(), reserve()
		redeemed := reserve()
		v, err := f.svc.Redeem(as(owner), redeemed, simpleBody("5"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Business.UpdateOneID(shop.ID).SetStatus(business.StatusINACTIVE).Save(ctx); err != nil {
			t.Fatal(err)
		}
		before := f.row(toRedeem)
		_, err = f.svc.Redeem(as(owner), toRedeem, simpleBody("5"))
		wantCode(t, err, apperr.BusinessInactive)
		f.unchanged(toRedeem, before)
		before = f.row(redeemed)
		_, err = f.svc.Negotiate(as(payer), redeemed, supplied("ethereum", "USDT", usdtEth))
		wantCode(t, err, apperr.BusinessInactive)
		f.unchanged(redeemed, before)
		// A stranger still learns nothing.
		_, err = f.svc.Redeem(as(device()), toRedeem, simpleBody("5"))
		wantCode(t, err, apperr.NotFound)

		if _, err := f.svc.Discard(as(owner), toDiscard); err != nil {
			t.Fatalf("discard on an inactive business: %v", err)
		}
		if _, err := f.svc.Resolve(as(payer), redeemed, receipts(v.ExpectedPayment.ID)); err != nil {
			t.Fatalf("resolve on an inactive business: %v", err)
		}
	})
}

// interop-init with vid: the caller must be the payer of vid too; a
// voucher it can merely see (as a business member) is not_found.
func TestInteropInitVidNeedsThePayer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		owner := f.user()
		shop := f.business(owner, business.StatusACTIVE)
		// The owner pays for something of its own (it is that voucher's payer)...
		ownSes, err := f.sessions.Create(as(owner))
		if err != nil {
			t.Fatal(err)
		}
		payee := &auth.Principal{Kind: auth.KindResource, ID: ownSes.ID}
		mine, err := f.svc.Reserve(as(payee), voucher.ReserveInput{Code: ownSes.Code})
		if err != nil {
			t.Fatal(err)
		}
		if mine, err = f.svc.Redeem(as(payee), mine.ID, simpleBody("1")); err != nil {
			t.Fatal(err)
		}
		// ...and sees, as a member, a business voucher someone else pays.
		otherPayer := device()
		ses, _ := f.session(otherPayer)
		theirs, err := f.svc.Reserve(as(owner), voucher.ReserveInput{Code: ses.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		if theirs, err = f.svc.Redeem(as(owner), theirs.ID, simpleBody("2")); err != nil {
			t.Fatal(err)
		}
		f.mustGet(owner, theirs.ID)
		sig := "0xsig"
		_, err = f.svc.InteropInit(as(owner), mine.ID, voucher.InteropInitInput{ID: "sub-1", Vid: &theirs.ID, Signature: &sig})
		wantCode(t, err, apperr.NotFound)
		n, err := db.InteropSubmission.Query().Count(context.Background())
		if err != nil || n != 0 {
			t.Fatalf("stored %d submissions (%v)", n, err)
		}
		// Its own voucher, as vid or as the path, works.
		if _, err := f.svc.InteropInit(as(owner), mine.ID, voucher.InteropInitInput{ID: "sub-2", Vid: &mine.ID, Signature: &sig}); err != nil {
			t.Fatal(err)
		}
		// The payer of theirs may name it as vid from another voucher it pays.
		ses2, res2 := f.session(otherPayer)
		second, err := f.svc.Reserve(as(res2), voucher.ReserveInput{Code: ses2.Code})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.InteropInit(as(otherPayer), second.ID, voucher.InteropInitInput{ID: "sub-3", Vid: &theirs.ID, Signature: &sig}); err != nil {
			t.Fatal(err)
		}
	})
}

// With Options.Ends, a member's ACTIVE membership is remembered by reads:
// a change written straight to the table (not through an end) is not seen,
// so the read ran no statement for it; once the user is ended (what
// business.Service.UpdateStatus to INACTIVE does in the app) the next read
// asks again and is 404. A membership made ACTIVE again is read afresh
// (only ACTIVE answers are remembered).
func TestActiveMembershipIsRememberedUntilEnded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ends := revocation.New(revocation.Options{})
		svc, err := voucher.NewService(db, voucher.Options{Finance: f.fin, Sessions: f.sessions, Now: f.clock.Now, Ends: ends})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		owner, member := f.user(), f.user()
		shop := f.business(owner, business.StatusACTIVE)
		f.member(shop, member, businessuser.StatusACTIVE)
		payer := device()
		ses, _ := f.session(payer)
		v, err := svc.Reserve(as(member), voucher.ReserveInput{Code: ses.Code, BusinessID: &shop.ID})
		if err != nil {
			t.Fatal(err)
		}
		setStatus := func(st businessuser.Status) {
			t.Helper()
			if _, err := db.BusinessUser.Update().Where(businessuser.BusinessID(shop.ID), businessuser.UserID(member.ID)).
				SetStatus(st).Save(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := svc.Get(as(member), v.ID); err != nil {
			t.Fatal(err)
		}
		setStatus(businessuser.StatusINACTIVE)
		if _, err := svc.Get(as(member), v.ID); err != nil {
			t.Fatalf("remembered membership: %v", err)
		}
		follow := voucher.Watch{Kind: pubsub.ByBusiness, Key: shop.ID}
		if err := svc.MayFollow(as(member), follow); err != nil {
			t.Fatalf("following the business on a remembered membership: %v", err)
		}
		ends.End(member.ID)
		_, err = svc.Get(as(member), v.ID)
		wantCode(t, err, apperr.NotFound)
		wantCode(t, svc.MayFollow(as(member), follow), apperr.NotFound)
		_, err = svc.Get(as(member), v.ID) // an INACTIVE answer is not remembered either way
		wantCode(t, err, apperr.NotFound)
		setStatus(businessuser.StatusACTIVE)
		if _, err := svc.Get(as(member), v.ID); err != nil {
			t.Fatalf("ACTIVE again: %v", err)
		}
		// Another user's end does not forget this one.
		setStatus(businessuser.StatusINACTIVE)
		ends.End(owner.ID)
		if _, err := svc.Get(as(member), v.ID); err != nil {
			t.Fatalf("after another user's end: %v", err)
		}
	})
}
