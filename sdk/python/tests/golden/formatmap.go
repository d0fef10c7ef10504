// Writes tests/golden/annotations from tests/golden/annotations.json the way the kubelet writes a downward-API
// file of `metadata.annotations` (kubernetes pkg/fieldpath FormatMap: sorted keys, `%v=%q` lines, the last
// without a newline), so the Python parser is tested against Go's own %q, not a re-implementation of it.
// One value that JSON cannot hold is added here: bytes that are not UTF-8 (Go writes them as \xNN).
//
//	go run formatmap.go < annotations.json > annotations
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

func main() {
	var m map[string]string
	if err := json.NewDecoder(os.Stdin).Decode(&m); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m["test.example/raw-bytes"] = "\xff\xfe ok \xc3"
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out string
	for _, k := range keys {
		out += fmt.Sprintf("%v=%q\n", k, m[k])
	}
	fmt.Print(strings.TrimSuffix(out, "\n"))
}
