// Package identity signs callers up and in: email-password users, mobile
// devices, and payees signing in with a payer's context code as a resource.
package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/device"
	"github.com/voucherd/voucherd/ent/user"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/password"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
)

// Credential types.
const (
	TypeMobileDevice  = "mobile-device"
	TypeResource      = "resource"
	TypeEmailPassword = "email-password"
)

// ResourcePrefix starts a resource name that names a payer's context.
const ResourcePrefix = "voucher::context::code::"

// Credentials is the sign-in / sign-up body: {type, data}. Data fields are
// pointers so a field that does not belong to the type can be refused.
type Credentials struct {
	Type string `json:"type"`
	Data *Data  `json:"data"`
}

// Data holds every type's fields; which are allowed depends on the type.
type Data struct {
	InstallationID *string `json:"installationId,omitempty"`
	Password       *string `json:"password,omitempty"`
	Resource       *string `json:"resource,omitempty"`
	Email          *string `json:"email,omitempty"`
	// unknown lists fields of no type, reported after the type is checked
	// (a bad type is invalid_type whatever data holds).
	unknown []string
}

// UnmarshalJSON decodes data, remembering unknown fields instead of failing
// on them so that the type can be judged first.
func (d *Data) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*d = Data{}
	for k, raw := range m {
		var dst **string
		switch k {
		case "installationId":
			dst = &d.InstallationID
		case "password":
			dst = &d.Password
		case "resource":
			dst = &d.Resource
		case "email":
			dst = &d.Email
		default:
			d.unknown = append(d.unknown, k)
			continue
		}
		var s *string
		if err := json.Unmarshal(raw, &s); err != nil {
			return &json.UnmarshalTypeError{Value: "value", Type: reflect.TypeOf(""), Field: "data." + k}
		}
		*dst = s
	}
	sort.Strings(d.unknown)
	return nil
}

// Authorization is the token part of a sign-in response.
type Authorization struct {
	Token     string
	ExpiresAt apitime.Time
}

// Account names the signed-in user or device.
type Account struct {
	ID   string
	Type string
}

// Result is what sign-in and sign-up return (REST renders it as
// view.OfAuth, GraphQL through the schema).
type Result struct {
	Authorization Authorization
	User          *Account
}

// Viewer describes the caller.
type Viewer struct {
	Kind      auth.Kind
	ID        string
	Email     string
	ExpiresAt time.Time
}

// Service signs callers up and in.
type Service struct {
	db       *storage.DB
	hasher   *password.Hasher
	issuer   *auth.Issuer
	sessions *session.Service
}

// NewService returns an identity service.
func NewService(db *storage.DB, hasher *password.Hasher, issuer *auth.Issuer, sessions *session.Service) *Service {
	return &Service{db: db, hasher: hasher, issuer: issuer, sessions: sessions}
}

var errInvalidCredentials = apperr.New(apperr.InvalidCredentials, "credentials invalid")

// field bounds in characters, from the spec.
type bound struct {
	name     string
	min, max int
}

var (
	bInstallationID = bound{"data.installationId", 32, 128}
	bDevicePassword = bound{"data.password", 32, 256}
	bResource       = bound{"data.resource", 4, 128}
	bEmail          = bound{"data.email", 3, 128}
	bUserPassword   = bound{"data.password", 8, 256}
)

func check(v *apperr.Validator, b bound, s *string) {
	if s == nil {
		v.Add(b.name, "required")
		return
	}
	n := utf8.RuneCountInString(*s)
	if !utf8.ValidString(*s) {
		v.Add(b.name, "must be valid UTF-8")
	} else if n < b.min || n > b.max {
		v.Add(b.name, fmt.Sprintf("must be %d to %d characters", b.min, b.max))
	}
}

// validate checks c for type (allowed lists the types the operation takes)
// and bounds; a field of another type is refused like an unknown field.
func validate(c Credentials, allowed ...string) error {
	ok := false
	for _, t := range allowed {
		ok = ok || c.Type == t
	}
	if !ok {
		return apperr.Newf(apperr.InvalidType, "type must be one of %s", strings.Join(allowed, ", "))
	}
	var v apperr.Validator
	if c.Data == nil {
		v.Add("data", "required")
		return v.Err()
	}
	d := c.Data
	for _, k := range d.unknown {
		v.Add("data."+k, "unknown field")
	}
	extra := func(name string, p *string) {
		if p != nil {
			v.Add("data."+name, "not allowed for type "+c.Type)
		}
	}
	switch c.Type {
	case TypeMobileDevice:
		check(&v, bInstallationID, d.InstallationID)
		check(&v, bDevicePassword, d.Password)
		extra("resource", d.Resource)
		extra("email", d.Email)
	case TypeEmailPassword:
		check(&v, bEmail, d.Email)
		check(&v, bUserPassword, d.Password)
		if d.Email != nil && !v.Failed() && !plausibleEmail(*d.Email) {
			v.Add("data.email", "must be an email address")
		}
		extra("resource", d.Resource)
		extra("installationId", d.InstallationID)
	case TypeResource:
		check(&v, bResource, d.Resource)
		extra("password", d.Password)
		extra("email", d.Email)
		extra("installationId", d.InstallationID)
	}
	return v.Err()
}

func plausibleEmail(s string) bool {
	at := strings.LastIndexByte(s, '@')
	return at > 0 && at < len(s)-1 && !strings.ContainsAny(s, " \t\r\n")
}

func normalizeEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// SignUp registers an email-password user or a mobile device and signs it in.
func (s *Service) SignUp(ctx context.Context, c Credentials) (*Result, error) {
	if err := validate(c, TypeMobileDevice, TypeEmailPassword); err != nil {
		return nil, err
	}
	hash, err := s.hasher.Hash(*c.Data.Password)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	switch c.Type {
	case TypeEmailPassword:
		u, err := s.db.User.Create().SetEmail(normalizeEmail(*c.Data.Email)).SetPasswordHash(hash).Save(ctx)
		if ent.IsConstraintError(err) {
			return nil, apperr.New(apperr.AlreadyExists, "an account with this email already exists")
		}
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		return s.userResult(u.ID)
	default:
		d, err := s.db.Device.Create().SetInstallationID(*c.Data.InstallationID).SetPasswordHash(hash).Save(ctx)
		if ent.IsConstraintError(err) {
			return nil, apperr.New(apperr.AlreadyExists, "this installation is already registered")
		}
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		return s.deviceResult(d.ID)
	}
}

// SignIn checks credentials and issues a token. An unknown account and a
// wrong password are the same error, in the same time.
func (s *Service) SignIn(ctx context.Context, c Credentials) (*Result, error) {
	if err := validate(c, TypeMobileDevice, TypeResource, TypeEmailPassword); err != nil {
		return nil, err
	}
	switch c.Type {
	case TypeEmailPassword:
		u, err := s.db.User.Query().Where(user.Email(normalizeEmail(*c.Data.Email))).Only(ctx)
		if err != nil && !ent.IsNotFound(err) {
			return nil, apperr.InternalError(err)
		}
		if !s.verify(u != nil, hashOf(u), *c.Data.Password) {
			return nil, errInvalidCredentials
		}
		return s.userResult(u.ID)
	case TypeMobileDevice:
		d, err := s.db.Device.Query().Where(device.InstallationID(*c.Data.InstallationID)).Only(ctx)
		if err != nil && !ent.IsNotFound(err) {
			return nil, apperr.InternalError(err)
		}
		hash := ""
		if d != nil {
			hash = d.PasswordHash
		}
		if !s.verify(d != nil, hash, *c.Data.Password) {
			return nil, errInvalidCredentials
		}
		return s.deviceResult(d.ID)
	default:
		code, ok := strings.CutPrefix(*c.Data.Resource, ResourcePrefix)
		if !ok {
			return nil, errInvalidCredentials
		}
		ses, err := s.sessions.Live(ctx, code)
		if err != nil {
			if apperr.CodeOf(err) == apperr.Internal {
				return nil, err
			}
			return nil, errInvalidCredentials
		}
		tok, exp, err := s.issuer.IssueResource(ses.ID, ses.ExpiresAt)
		if err != nil {
			return nil, err
		}
		return &Result{Authorization: Authorization{Token: tok, ExpiresAt: apitime.From(exp)}}, nil
	}
}

func hashOf(u *ent.User) string {
	if u == nil {
		return ""
	}
	return u.PasswordHash
}

// verify runs a full argon2id verification even for an unknown account, so
// timing does not reveal which accounts exist.
func (s *Service) verify(found bool, hash, pw string) bool {
	if !found {
		s.hasher.DummyVerify(pw)
		return false
	}
	ok, err := s.hasher.Verify(hash, pw)
	return err == nil && ok
}

func (s *Service) userResult(id string) (*Result, error) {
	tok, exp, err := s.issuer.IssueUser(id)
	if err != nil {
		return nil, err
	}
	return &Result{Authorization: Authorization{Token: tok, ExpiresAt: apitime.From(exp)}, User: &Account{ID: id, Type: TypeEmailPassword}}, nil
}

func (s *Service) deviceResult(id string) (*Result, error) {
	tok, exp, err := s.issuer.IssueDevice(id)
	if err != nil {
		return nil, err
	}
	return &Result{Authorization: Authorization{Token: tok, ExpiresAt: apitime.From(exp)}, User: &Account{ID: id, Type: TypeMobileDevice}}, nil
}

// Viewer describes the authenticated caller; anonymous callers get unauthorized.
func (s *Service) Viewer(ctx context.Context) (*Viewer, error) {
	p, err := operation.Caller(ctx, operation.Viewer)
	if err != nil {
		return nil, err
	}
	v := &Viewer{Kind: p.Kind, ID: p.ID, ExpiresAt: p.ExpiresAt}
	if p.Kind == auth.KindUser {
		u, err := s.db.User.Get(ctx, p.ID)
		if ent.IsNotFound(err) {
			return nil, apperr.New(apperr.Unauthorized, "bearer token missing or invalid")
		}
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		v.Email = u.Email
	}
	return v, nil
}
