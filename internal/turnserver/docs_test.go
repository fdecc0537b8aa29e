package turnserver

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// docs/configuration.md documents every setting.
func TestConfigurationDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	FlagSet().VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(doc), "`"+f.Name+"`") {
			t.Errorf("docs/configuration.md does not document %q", f.Name)
		}
	})
}
