// Package accesslog reads access logs, the input of sluice replay and
// sluice suggest: nginx/Apache combined logs, JSON lines and CSV, one
// request a line, in bounded memory. A line it cannot read is counted by
// reason (Malformed), never fatal; a line longer than MaxLine is skipped.
package accesslog

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxLine bounds one line of an access log: a longer one is counted as
// malformed and skipped, so no line can make sluice hold more.
const MaxLine = 64 << 10

// Record is one request read from an access log.
type Record struct {
	Time     time.Time
	Method   string
	Target   string // path and query, as requested
	Host     string
	IP       string
	Header   [][2]string // chosen headers: name, value
	Duration time.Duration
	Status   int // the response's status code; 0 when not logged
}

// Failed reports that the logged response was a failure: 4xx or 5xx.
func (rec *Record) Failed() bool { return rec.Status >= 400 }

// OpenFormat returns the reader of the format named (auto: told by the
// first line: '{' starts JSON lines, a combined log line is one, anything
// else is CSV).
func OpenFormat(name string, first []byte, fields Fields) (Format, error) {
	if name == "auto" {
		switch line := bytes.TrimSpace(first); {
		case bytes.HasPrefix(line, []byte("{")):
			name = "json"
		case looksLikeCSVHeader(line, fields):
			name = "csv"
		default:
			name = "combined" // its errors say what was expected
		}
	}
	switch name {
	case "combined":
		return combinedFormat{}, nil
	case "json":
		return jsonFormat{fields}, nil
	case "csv":
		return &csvFormat{fields: fields}, nil
	}
	return nil, fmt.Errorf("--format %q: want auto, combined, json or csv", name)
}

// looksLikeCSVHeader reports that line names the time column of a CSV
// log (or that the columns are given by number).
func looksLikeCSVHeader(line []byte, fields Fields) bool {
	if _, err := strconv.Atoi(fields.time); err == nil {
		return true
	}
	for _, name := range strings.Split(string(line), ",") {
		if strings.Trim(strings.TrimSpace(name), `"`) == fields.time {
			return true
		}
	}
	return false
}

// Format reads one line into a record, or says why it cannot.
type Format interface {
	parse(line []byte, rec *Record) error
}

// Fields says which field of a JSON line or which column of a CSV file
// holds each part of a request: its name (or, in CSV, a column number
// from 1). Headers are requests' header names with their field.
type Fields struct {
	time, method, path, host, ip, duration, status string
	headers                                        [][2]string // header name, field
}

// DefaultFields are the names read when --field does not say.
var DefaultFields = Fields{time: "time", method: "method", path: "path", host: "host", ip: "ip", duration: "duration", status: "status"}

// Set applies one --field NAME=FIELD.
func (f *Fields) Set(s string) error {
	name, field, ok := strings.Cut(s, "=")
	if !ok || field == "" {
		return fmt.Errorf("%q: want NAME=FIELD, such as ip=remote_addr or header:X-User=user", s)
	}
	name = strings.ToLower(name)
	named := map[string]*string{"time": &f.time, "method": &f.method, "path": &f.path, "host": &f.host,
		"ip": &f.ip, "duration": &f.duration, "status": &f.status}
	if p, ok := named[name]; ok {
		*p = field
		return nil
	}
	h, ok := strings.CutPrefix(name, "header:")
	if !ok || h == "" {
		return fmt.Errorf("%q: NAME is time, method, path, host, ip, duration, status or header:NAME", s)
	}
	f.headers = append(f.headers, [2]string{h, field})
	return nil
}

// Read reads an access log line by line, handing each record to fn and
// counting what it cannot read. A line longer than MaxLine is malformed.
func Read(r io.Reader, format Format, bad *Malformed, fn func(*Record)) error {
	br := bufio.NewReaderSize(r, MaxLine)
	var rec Record
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) { // skip the rest of it
				_, err = br.ReadSlice('\n')
			}
			bad.Add(n, "line longer than 64 KiB")
			if err == nil {
				continue
			}
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec = Record{Header: rec.Header[:0]}
			switch perr := format.parse(bytes.TrimRight(line, "\r\n"), &rec); {
			case errors.Is(perr, errHeaderLine):
			case perr != nil:
				bad.Add(n, perr.Error())
			default:
				fn(&rec)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Malformed counts the lines that could not be read, by reason, with the
// first few line numbers of each (bounded: at most maxReasons reasons).
type Malformed struct {
	Total   int
	Reasons map[string]*Reason // by reason
	Order   []string           // the reasons, in the order first met
}

// Reason is how many lines one reason made unreadable, and the numbers
// of the first three.
type Reason struct {
	Count int
	Lines []int
}

const maxReasons = 20

// Add counts line as unreadable for reason.
func (m *Malformed) Add(line int, reason string) {
	m.Total++
	if m.Reasons == nil {
		m.Reasons = map[string]*Reason{}
	}
	r := m.Reasons[reason]
	if r == nil {
		if len(m.Reasons) >= maxReasons {
			reason = "other reasons"
			if r = m.Reasons[reason]; r == nil {
				r = &Reason{}
				m.Reasons[reason] = r
				m.Order = append(m.Order, reason)
			}
		} else {
			r = &Reason{}
			m.Reasons[reason] = r
			m.Order = append(m.Order, reason)
		}
	}
	r.Count++
	if len(r.Lines) < 3 {
		r.Lines = append(r.Lines, line)
	}
}

// combinedFormat reads nginx's and Apache's combined log format (and the
// common format, without referer and user agent):
//
//	203.0.113.7 - - [01/Jan/2026:12:00:00 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "-" "curl/8.5"
//
// It gives the headers Referer and User-Agent.
type combinedFormat struct{}

var combinedRE = regexp.MustCompile(`^(\S+) \S+ (?:\S+|"[^"]*") \[([^\]]+)\] "((?:[^"\\]|\\.)*)" (\d{3}|-) (?:\d+|-)(?: "((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)")?`)

// CombinedTime is the layout of the combined format's times.
const CombinedTime = "02/Jan/2006:15:04:05 -0700"

func (combinedFormat) parse(line []byte, rec *Record) error {
	m := combinedRE.FindSubmatch(line)
	if m == nil {
		return errors.New("not in combined log format")
	}
	t, err := time.Parse(CombinedTime, string(m[2]))
	if err != nil {
		return fmt.Errorf("time %q: want %s", m[2], CombinedTime)
	}
	f := strings.Fields(string(m[3]))
	if len(f) < 2 {
		return fmt.Errorf("request %q: want METHOD TARGET PROTOCOL", m[3])
	}
	rec.Time, rec.Method, rec.Target, rec.IP = t, f[0], f[1], string(m[1])
	if err := checkIP(rec.IP); err != nil {
		return err
	}
	rec.Status, _ = strconv.Atoi(string(m[4])) // "-": 0, not logged
	for i, name := range []string{"Referer", "User-Agent"} {
		if v := string(m[5+i]); v != "" && v != "-" {
			rec.Header = append(rec.Header, [2]string{name, v})
		}
	}
	return nil
}

// checkIP refuses a client address that is not an IP address.
func checkIP(ip string) error {
	if net.ParseIP(ip) == nil {
		return fmt.Errorf("client address %q: not an IP address", ip)
	}
	return nil
}

// jsonFormat reads JSON lines: one object per line, its fields named by
// Fields.
type jsonFormat struct{ fields Fields }

func (j jsonFormat) parse(line []byte, rec *Record) error {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil || obj == nil {
		return errors.New("not a JSON object")
	}
	get := func(name string) string {
		switch v := obj[name].(type) {
		case string:
			return v
		case json.Number:
			return v.String()
		}
		return ""
	}
	return fillRecord(rec, j.fields, get)
}

// csvFormat reads CSV whose first line names the columns (or whose
// columns Fields gives by number).
type csvFormat struct {
	fields  Fields
	columns map[string]int // by name, from the first line
}

func (c *csvFormat) parse(line []byte, rec *Record) error {
	r := csv.NewReader(bytes.NewReader(line))
	r.FieldsPerRecord = -1
	row, err := r.Read()
	if err != nil {
		return errors.New("not a CSV line")
	}
	if c.columns == nil { // the header line
		c.columns = map[string]int{}
		for i, name := range row {
			c.columns[strings.TrimSpace(name)] = i
		}
		return errHeaderLine
	}
	get := func(name string) string {
		i, ok := c.columns[name]
		if n, err := strconv.Atoi(name); err == nil {
			i, ok = n-1, true
		}
		if !ok || i < 0 || i >= len(row) {
			return ""
		}
		return row[i]
	}
	return fillRecord(rec, c.fields, get)
}

// errHeaderLine marks a CSV file's first line, which names the columns.
var errHeaderLine = errors.New("header line")

// fillRecord reads a record's parts by field name.
func fillRecord(rec *Record, f Fields, get func(string) string) error {
	ts := get(f.time)
	if ts == "" {
		return fmt.Errorf("no time (field %q; --field time=NAME)", f.time)
	}
	t, err := parseLogTime(ts)
	if err != nil {
		return err
	}
	rec.Time, rec.Method, rec.Target, rec.Host, rec.IP = t, get(f.method), get(f.path), get(f.host), get(f.ip)
	if rec.Method == "" {
		rec.Method = "GET"
	}
	if rec.Target == "" {
		return fmt.Errorf("no path (field %q; --field path=NAME)", f.path)
	}
	if err := checkIP(rec.IP); err != nil {
		return fmt.Errorf("%v (field %q; --field ip=NAME)", err, f.ip)
	}
	if d := get(f.duration); d != "" {
		s, err := strconv.ParseFloat(d, 64)
		if err != nil || s < 0 || s > 86400 || math.IsNaN(s) {
			return fmt.Errorf("duration %q: want seconds, from 0 to 86400", d)
		}
		rec.Duration = time.Duration(s * float64(time.Second))
	}
	if st := get(f.status); st != "" {
		n, err := strconv.Atoi(st)
		if err != nil || n < 100 || n > 999 {
			return fmt.Errorf("status %q: want an HTTP status code, 100 to 999 (field %q; --field status=NAME)", st, f.status)
		}
		rec.Status = n
	}
	for _, h := range f.headers {
		if v := get(h[1]); v != "" {
			rec.Header = append(rec.Header, [2]string{h[0], v})
		}
	}
	return nil
}

// parseLogTime reads a time as logs write it: RFC 3339, the combined
// format's, "2006-01-02 15:04:05" (UTC), or Unix seconds (or
// milliseconds, from 10^11 on) with a fraction.
func parseLogTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, CombinedTime, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e14 || math.IsNaN(f) {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339, %s or Unix seconds", s, CombinedTime)
	}
	if f >= 1e11 {
		f /= 1000
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
}
