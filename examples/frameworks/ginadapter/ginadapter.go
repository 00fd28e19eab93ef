// Package ginadapter lets gin use net/http middleware such as sluice's httplimit.
package ginadapter

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Adapt turns net/http middleware into gin middleware: the rest of the gin
// chain runs where the middleware calls its next handler; if it answers the
// request itself (a 429), the chain is aborted.
func Adapt(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		called := false
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !called {
			c.Abort()
		}
	}
}
