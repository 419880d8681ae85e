"""The package version, in a module of its own: every layer may record it without importing the
package root (whose lazy attributes reach up to the jobs)."""

__version__ = "0.1.0"
