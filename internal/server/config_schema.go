package server

import (
	"reflect"
	"strconv"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/configfile"
	upcfg "github.com/sluicehq/sluice/upstream"
)

//go:generate go run ../configfile/schemagen -out ../../docs/sluice.schema.json

// ConfigEnums are the values the config's enumerated string fields take, by
// generic YAML path (configfile.Enums): the loader names a near miss
// ("did you mean anthropic?") and the JSON Schema lists them. Priorities
// are also accepted by number (0 critical to 3 low).
func ConfigEnums() configfile.Enums {
	var priorities []string
	for p := range upcfg.Priority(upcfg.NumPriorities) {
		priorities = append(priorities, p.String())
	}
	for p := range upcfg.NumPriorities {
		priorities = append(priorities, strconv.Itoa(p))
	}
	return configfile.Enums{
		"upstreams[].protocol":           {string(upcfg.Anthropic), string(upcfg.OpenAI)},
		"upstreams[].profile":            {string(upcfg.Balanced), string(upcfg.Latency), string(upcfg.Throughput)},
		"upstreams[].output_reservation": {upcfg.OutputReservationMaxTokens, upcfg.OutputReservationLearned},
		"upstreams[].fallback_classes[]": priorities,
		"clients[].default_priority":     priorities,
		"clients[].max_priority":         priorities,
		"clients[].role":                 {clients.RoleClient, clients.RoleAdmin},
		"prices.unknown":                 {admit.PricesUnknownFallback, admit.PricesUnknownRefuse},
	}
}

// ConfigSchemaID is where the checked-in schema is published, for the
// yaml-language-server comment line.
const ConfigSchemaID = "https://raw.githubusercontent.com/sluicehq/sluice/main/docs/sluice.schema.json"

// ConfigSchema returns the JSON Schema of the config file, generated from
// Config and the doc comments of its types in the source under
// moduleRoot (go generate writes it to docs/sluice.schema.json).
func ConfigSchema(moduleRoot string) ([]byte, error) {
	t := reflect.TypeFor[Config]()
	docs, err := configfile.ReadDocs(t, moduleRoot, "github.com/sluicehq/sluice")
	if err != nil {
		return nil, err
	}
	return configfile.Schema(t, docs, ConfigEnums(), ConfigSchemaID, "Sluice gateway config (sluice serve --config)")
}
