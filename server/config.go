package server

import "github.com/sluicehq/sluice/server/config"

// The configuration lives in package config; these names keep
// server.Config and its companions, which cmd/sluice and the tests use.
type (
	// Config is sluice serve's configuration (config.Config).
	Config = config.Config
	// Duration is a time.Duration written as "250ms" in YAML.
	Duration = config.Duration
	// TLSConfig turns on TLS for the listeners (config.TLSConfig).
	TLSConfig = config.TLSConfig
	// LogConfig sets the log level and format (config.LogConfig).
	LogConfig = config.LogConfig
)

// Default listen addresses (config.DefaultGateway and the others).
const (
	DefaultGateway = config.DefaultGateway
	DefaultGRPC    = config.DefaultGRPC
	DefaultAdmin   = config.DefaultAdmin
	DefaultAPI     = config.DefaultAPI
)

// Settings are every setting of sluice serve (config.Settings).
var Settings = config.Settings

// Defaults returns the configuration of `sluice serve` with no file, flag
// or variable.
func Defaults() Config { return config.Defaults() }

// LoadConfig reads a YAML config file over base (config.LoadConfig).
func LoadConfig(path string, base Config) (Config, error) { return config.LoadConfig(path, base) }
