// quantity_oracle reads a JSON array of strings on stdin and prints, for each, what
// Kubernetes' own resource.ParseQuantity makes of it: accepted or not, and the exact
// decimal value. tests/fixtures/k8s_quantities.json is its output (regenerate with
// tests/tools/quantity_oracle/regen.sh); tests/test_quantity.py holds headroom's parser to it.
package main

import (
	"encoding/json"
	"math"
	"os"

	"gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Beyond int64 Kubernetes caps SI quantities at 2^63-1 and keeps exponent ones whole
// (10^999999 printed is a megabyte): such values are reported as "out-of-range".
var maxInt64 = inf.NewDec(math.MaxInt64, 0)

type verdict struct {
	In    string `json:"in"`
	OK    bool   `json:"ok"`
	Value string `json:"value,omitempty"`
}

func main() {
	var inputs []string
	if err := json.NewDecoder(os.Stdin).Decode(&inputs); err != nil {
		panic(err)
	}
	out := make([]verdict, 0, len(inputs))
	for _, s := range inputs {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			out = append(out, verdict{In: s})
			continue
		}
		d := q.AsDec()
		value := "out-of-range"
		if new(inf.Dec).Abs(d).Cmp(maxInt64) < 0 {
			value = d.String()
		}
		out = append(out, verdict{In: s, OK: true, Value: value})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
