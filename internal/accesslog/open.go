package accesslog

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/sluicehq/sluice/decide"
)

// Open opens the log at path (- for standard input) and tells its format
// (auto: by its first line, as OpenFormat does).
func Open(path, format string, fields Fields) (io.ReadCloser, Format, error) {
	var rc io.ReadCloser = os.Stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		rc = file
	}
	br := bufio.NewReaderSize(rc, MaxLine)
	first, _ := br.Peek(MaxLine)
	if i := strings.IndexByte(string(first), '\n'); i >= 0 {
		first = first[:i]
	}
	f, err := OpenFormat(format, first, fields)
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{br, rc}, f, nil
}

// Request builds the request a logged line stands for, as sluice serve's
// gateway would have received it from the logged client; a target that
// is not a request target is the client's error.
func (rec *Record) Request() (*http.Request, error) {
	u, err := url.ParseRequestURI(rec.Target)
	if err != nil {
		return nil, &decide.ClientError{Field: "path", Reason: "not a request target"}
	}
	req := &http.Request{
		Method: rec.Method, URL: u, RequestURI: rec.Target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: rec.Host, Header: http.Header{}, RemoteAddr: net.JoinHostPort(rec.IP, "40000"),
	}
	if req.Host == "" {
		req.Host = "localhost"
	}
	for _, h := range rec.Header {
		req.Header.Add(h[0], h[1])
	}
	return req.WithContext(context.Background()), nil
}
