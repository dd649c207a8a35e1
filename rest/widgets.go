package rest

import (
	"net/http"
	"strings"

	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/widget"
)

// ClientSecretHeader carries a widget's client secret on its public routes.
const ClientSecretHeader = "X-Client-Secret"

// widgetRoutes are the business's widget routes (rate group widgets; user
// tokens, the service decides member or manager), the widgets' public
// routes (widgets-public, counted per widget: the client secret or a
// member's token, which the service checks) and the checkout capability
// (widgets-public, counted per checkout token).
func (s *server) widgetRoutes() {
	s.route(operation.CreateWidget, s.createWidget)
	s.route(operation.ListWidgets, s.listWidgets)
	s.route(operation.GetWidget, s.getWidget)
	s.route(operation.UpdateWidget, s.updateWidget)
	s.route(operation.RotateWidgetSecret, s.rotateWidgetSecret)
	s.route(operation.DeleteWidget, s.deleteWidget)

	s.route(operation.WidgetConfig, s.widgetConfig)
	s.route(operation.CreateCheckout, s.createCheckout)
	s.route(operation.GetCheckout, s.getCheckout)
	s.route(operation.SubmitPayment, s.submitPayment)
}

func (s *server) createWidget(w http.ResponseWriter, r *http.Request) error {
	var in widget.CreateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	out, err := s.Widgets.Create(r.Context(), r.PathValue("businessId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfWidgetWithSecret(out.Widget, out.ClientSecret))
}

func (s *server) listWidgets(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.Widgets.List(r.Context(), r.PathValue("businessId"))
	if err != nil {
		return err
	}
	return ok(w, view.List(ws, view.OfWidget))
}

func (s *server) getWidget(w http.ResponseWriter, r *http.Request) error {
	x, err := s.Widgets.Get(r.Context(), r.PathValue("businessId"), r.PathValue("widgetId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfWidget(x))
}

func (s *server) updateWidget(w http.ResponseWriter, r *http.Request) error {
	var in widget.UpdateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	x, err := s.Widgets.Update(r.Context(), r.PathValue("businessId"), r.PathValue("widgetId"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfWidget(x))
}

func (s *server) rotateWidgetSecret(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	out, err := s.Widgets.RotateSecret(r.Context(), r.PathValue("businessId"), r.PathValue("widgetId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfWidgetWithSecret(out.Widget, out.ClientSecret))
}

func (s *server) deleteWidget(w http.ResponseWriter, r *http.Request) error {
	if err := decodeEmpty(r); err != nil {
		return err
	}
	if _, err := s.Widgets.Delete(r.Context(), r.PathValue("businessId"), r.PathValue("widgetId")); err != nil {
		return err
	}
	httpx.WriteEmpty(w, http.StatusOK)
	return nil
}

func (s *server) widgetConfig(w http.ResponseWriter, r *http.Request) error {
	c, err := s.Widgets.Config(r.Context(), r.PathValue("widgetId"), r.Header.Get(ClientSecretHeader))
	if err != nil {
		return err
	}
	return ok(w, view.OfWidgetConfig(c))
}

func (s *server) createCheckout(w http.ResponseWriter, r *http.Request) error {
	secret := r.Header.Get(ClientSecretHeader)
	var in widget.CheckoutInput
	if err := decode(r, &in); err != nil {
		// Who may use the widget comes before what they sent.
		if _, aerr := s.Widgets.Config(r.Context(), r.PathValue("widgetId"), secret); aerr != nil {
			return aerr
		}
		return err
	}
	c, err := s.Widgets.CreateCheckout(r.Context(), r.PathValue("widgetId"), secret, in)
	if err != nil {
		return err
	}
	url := c.URL
	if strings.HasPrefix(url, "/") {
		url = requestOrigin(r) + url
	}
	return ok(w, view.OfCheckout(c.Voucher, url))
}

// requestOrigin is the scheme and host the request came to, for a
// checkout URL when VOUCHER_PUBLIC_URL is unset (development). The answer
// goes only to the caller who sent the Host.
func requestOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *server) getCheckout(w http.ResponseWriter, r *http.Request) error {
	c, err := s.Widgets.Checkout(r.Context(), r.PathValue("token"))
	if err != nil {
		return err
	}
	return ok(w, view.OfPublicCheckout(c))
}

func (s *server) submitPayment(w http.ResponseWriter, r *http.Request) error {
	var in widget.SubmitPaymentInput
	if err := decode(r, &in); err != nil {
		if _, cerr := s.Widgets.Checkout(r.Context(), r.PathValue("token")); cerr != nil {
			return cerr
		}
		return err
	}
	c, err := s.Widgets.SubmitPayment(r.Context(), r.PathValue("token"), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfPublicCheckout(c))
}
