package operator

import (
	"os"
	"testing"

	"github.com/shipstream/bloodraven/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }
