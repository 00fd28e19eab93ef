package main

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

// maxLogLine bounds one line of an access log: a longer one is counted as
// malformed and skipped, so no line can make sluice hold more.
const maxLogLine = 64 << 10

// logRecord is one request read from an access log.
type logRecord struct {
	time     time.Time
	method   string
	target   string // path and query, as requested
	host     string
	ip       string
	header   [][2]string // chosen headers: name, value
	duration time.Duration
	status   int // the response's status code; 0 when not logged
}

// failed reports that the logged response was a failure: 4xx or 5xx.
func (rec *logRecord) failed() bool { return rec.status >= 400 }

// openFormat returns the reader of the format named (auto: told by the
// first line: '{' starts JSON lines, a combined log line is one, anything
// else is CSV).
func openFormat(name string, first []byte, fields logFields) (logFormat, error) {
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
func looksLikeCSVHeader(line []byte, fields logFields) bool {
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

// logFormat reads one line into a record, or says why it cannot.
type logFormat interface {
	parse(line []byte, rec *logRecord) error
}

// logFields says which field of a JSON line or which column of a CSV file
// holds each part of a request: its name (or, in CSV, a column number
// from 1). Headers are requests' header names with their field.
type logFields struct {
	time, method, path, host, ip, duration, status string
	headers                                        [][2]string // header name, field
}

// defaultFields are the names read when --field does not say.
var defaultFields = logFields{time: "time", method: "method", path: "path", host: "host", ip: "ip", duration: "duration", status: "status"}

// setField applies one --field NAME=FIELD.
func (f *logFields) setField(s string) error {
	name, field, ok := strings.Cut(s, "=")
	if !ok || field == "" {
		return fmt.Errorf("%q: want NAME=FIELD, such as ip=remote_addr or header:X-User=user", s)
	}
	switch name = strings.ToLower(name); name {
	case "time":
		f.time = field
	case "method":
		f.method = field
	case "path":
		f.path = field
	case "host":
		f.host = field
	case "ip":
		f.ip = field
	case "duration":
		f.duration = field
	case "status":
		f.status = field
	default:
		h, ok := strings.CutPrefix(name, "header:")
		if !ok || h == "" {
			return fmt.Errorf("%q: NAME is time, method, path, host, ip, duration, status or header:NAME", s)
		}
		f.headers = append(f.headers, [2]string{h, field})
	}
	return nil
}

// readLog reads an access log line by line, handing each record to fn and
// counting what it cannot read. A line longer than maxLogLine is malformed.
func readLog(r io.Reader, format logFormat, bad *malformed, fn func(*logRecord)) error {
	br := bufio.NewReaderSize(r, maxLogLine)
	var rec logRecord
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) { // skip the rest of it
				_, err = br.ReadSlice('\n')
			}
			bad.add(n, "line longer than 64 KiB")
			if err == nil {
				continue
			}
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec = logRecord{header: rec.header[:0]}
			switch perr := format.parse(bytes.TrimRight(line, "\r\n"), &rec); {
			case errors.Is(perr, errHeaderLine):
			case perr != nil:
				bad.add(n, perr.Error())
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

// malformed counts the lines that could not be read, by reason, with the
// first few line numbers of each (bounded: at most maxReasons reasons).
type malformed struct {
	total   int
	reasons map[string]*malformedReason
	order   []string
}

type malformedReason struct {
	count int
	lines []int
}

const maxReasons = 20

func (m *malformed) add(line int, reason string) {
	m.total++
	if m.reasons == nil {
		m.reasons = map[string]*malformedReason{}
	}
	r := m.reasons[reason]
	if r == nil {
		if len(m.reasons) >= maxReasons {
			reason = "other reasons"
			if r = m.reasons[reason]; r == nil {
				r = &malformedReason{}
				m.reasons[reason] = r
				m.order = append(m.order, reason)
			}
		} else {
			r = &malformedReason{}
			m.reasons[reason] = r
			m.order = append(m.order, reason)
		}
	}
	r.count++
	if len(r.lines) < 3 {
		r.lines = append(r.lines, line)
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

const combinedTime = "02/Jan/2006:15:04:05 -0700"

func (combinedFormat) parse(line []byte, rec *logRecord) error {
	m := combinedRE.FindSubmatch(line)
	if m == nil {
		return errors.New("not in combined log format")
	}
	t, err := time.Parse(combinedTime, string(m[2]))
	if err != nil {
		return fmt.Errorf("time %q: want %s", m[2], combinedTime)
	}
	f := strings.Fields(string(m[3]))
	if len(f) < 2 {
		return fmt.Errorf("request %q: want METHOD TARGET PROTOCOL", m[3])
	}
	rec.time, rec.method, rec.target, rec.ip = t, f[0], f[1], string(m[1])
	if err := checkIP(rec.ip); err != nil {
		return err
	}
	rec.status, _ = strconv.Atoi(string(m[4])) // "-": 0, not logged
	for i, name := range []string{"Referer", "User-Agent"} {
		if v := string(m[5+i]); v != "" && v != "-" {
			rec.header = append(rec.header, [2]string{name, v})
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
// logFields.
type jsonFormat struct{ fields logFields }

func (j jsonFormat) parse(line []byte, rec *logRecord) error {
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
// columns logFields gives by number).
type csvFormat struct {
	fields  logFields
	columns map[string]int // by name, from the first line
}

func (c *csvFormat) parse(line []byte, rec *logRecord) error {
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
func fillRecord(rec *logRecord, f logFields, get func(string) string) error {
	ts := get(f.time)
	if ts == "" {
		return fmt.Errorf("no time (field %q; --field time=NAME)", f.time)
	}
	t, err := parseLogTime(ts)
	if err != nil {
		return err
	}
	rec.time, rec.method, rec.target, rec.host, rec.ip = t, get(f.method), get(f.path), get(f.host), get(f.ip)
	if rec.method == "" {
		rec.method = "GET"
	}
	if rec.target == "" {
		return fmt.Errorf("no path (field %q; --field path=NAME)", f.path)
	}
	if err := checkIP(rec.ip); err != nil {
		return fmt.Errorf("%v (field %q; --field ip=NAME)", err, f.ip)
	}
	if d := get(f.duration); d != "" {
		s, err := strconv.ParseFloat(d, 64)
		if err != nil || s < 0 || s > 86400 || math.IsNaN(s) {
			return fmt.Errorf("duration %q: want seconds, from 0 to 86400", d)
		}
		rec.duration = time.Duration(s * float64(time.Second))
	}
	if st := get(f.status); st != "" {
		n, err := strconv.Atoi(st)
		if err != nil || n < 100 || n > 999 {
			return fmt.Errorf("status %q: want an HTTP status code, 100 to 999 (field %q; --field status=NAME)", st, f.status)
		}
		rec.status = n
	}
	for _, h := range f.headers {
		if v := get(h[1]); v != "" {
			rec.header = append(rec.header, [2]string{h[0], v})
		}
	}
	return nil
}

// parseLogTime reads a time as logs write it: RFC 3339, the combined
// format's, "2006-01-02 15:04:05" (UTC), or Unix seconds (or
// milliseconds, from 10^11 on) with a fraction.
func parseLogTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, combinedTime, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e14 || math.IsNaN(f) {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339, %s or Unix seconds", s, combinedTime)
	}
	if f >= 1e11 {
		f /= 1000
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
}
