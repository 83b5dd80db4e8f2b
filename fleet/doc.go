// Package fleet holds the multi-process integration tests of fleetmux: a controller and node agents as separate processes.
package fleet
