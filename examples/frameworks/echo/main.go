// Command echo shows sluice's net/http middleware in echo, whose
// echo.WrapMiddleware adapts it.
//
//	go run ./echo   # then: curl -i localhost:8083/hello
package main

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sluicehq/sluice/examples/frameworks/internal/demo"
)

func main() {
	limit, closeStore := demo.Middleware()
	defer closeStore()

	e := echo.New()
	e.Use(echo.WrapMiddleware(limit))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	e.Logger.Fatal(e.Start("127.0.0.1:8083"))
}
