package rest

import (
	"net/http"

	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/view"
)

func (s *server) signUp(w http.ResponseWriter, r *http.Request) error {
	var in identity.Credentials
	if err := decode(r, &in); err != nil {
		return err
	}
	res, err := s.Identity.SignUp(r.Context(), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfAuth(res))
}

func (s *server) signIn(w http.ResponseWriter, r *http.Request) error {
	var in identity.Credentials
	if err := decode(r, &in); err != nil {
		return err
	}
	res, err := s.Identity.SignIn(r.Context(), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfAuth(res))
}

func (s *server) createSession(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	res, err := s.Sessions.Create(r.Context())
	if err != nil {
		return err
	}
	return ok(w, view.OfSession(res))
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Sessions.Get(r.Context(), r.PathValue("sessionId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfSession(res))
}

func (s *server) closeSession(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	res, err := s.Sessions.Close(r.Context(), r.PathValue("sessionId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfSession(res))
}
