package frameworks_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/sluicehq/sluice/examples/frameworks/ginadapter"
	"github.com/sluicehq/sluice/examples/frameworks/internal/demo"
)

// Each framework, with the limiter in front, admits the first two requests
// of a client and answers the third with 429 and the RateLimit fields.
func TestFrameworks(t *testing.T) {
	hello := "hello\n"
	routers := map[string]func(mw func(http.Handler) http.Handler) http.Handler{
		"chi": func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Get("/hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, hello) })
			return r
		},
		"gin": func(mw func(http.Handler) http.Handler) http.Handler {
			gin.SetMode(gin.ReleaseMode)
			r := gin.New()
			r.Use(ginadapter.Adapt(mw))
			r.GET("/hello", func(c *gin.Context) { c.String(200, hello) })
			return r
		},
		"echo": func(mw func(http.Handler) http.Handler) http.Handler {
			e := echo.New()
			e.Use(echo.WrapMiddleware(mw))
			e.GET("/hello", func(c echo.Context) error { return c.String(200, hello) })
			return e
		},
	}
	for name, build := range routers {
		t.Run(name, func(t *testing.T) {
			mw, closeStore := demo.Middleware()
			defer closeStore()
			srv := httptest.NewServer(build(mw))
			defer srv.Close()
			for i, want := range []int{200, 200, 429} {
				resp, err := http.Get(srv.URL + "/hello")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want || resp.Header.Get("RateLimit") == "" {
					t.Fatalf("request %d: %d %q (RateLimit %q)", i, resp.StatusCode, body, resp.Header.Get("RateLimit"))
				}
				if want == 200 && string(body) != hello {
					t.Fatalf("request %d: body %q", i, body)
				}
			}
		})
	}
}
