// Command gin shows sluice's net/http middleware in gin, through a small
// adapter.
//
//	go run ./gin    # then: curl -i localhost:8082/hello
package main

import (
	"log"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/examples/frameworks/ginadapter"
	"github.com/sluicehq/sluice/examples/frameworks/internal/demo"
)

func main() {
	limit, closeStore := demo.Middleware()
	defer closeStore()

	r := gin.New()
	r.Use(ginadapter.Adapt(limit))
	r.GET("/hello", func(c *gin.Context) { c.String(200, "hello\n") })
	log.Fatal(r.Run("127.0.0.1:8082"))
}
