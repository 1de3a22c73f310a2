# The index of tasks. `make help` lists them.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
export SLUICE_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: help test test-race lint fuzz bench demo build release image generate ci ui-vendor

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## Build the sluice binary into ./bin (static, version-stamped: deploy/build.sh).
	deploy/build.sh bin/sluice

release: ## Build the release archives (linux, darwin x amd64, arm64) and SHA256SUMS into ./dist.
	deploy/release.sh

image: ## Build the Docker image sluice:VERSION (needs a Docker engine; docs/deploy.md).
	docker build -t sluice:$$(git describe --tags --always --dirty) \
		--build-arg VERSION=$$(git describe --tags --always --dirty) \
		--build-arg COMMIT=$$(git rev-parse HEAD) \
		--build-arg DATE=$$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ) .

generate: ## Regenerate the generated code (the job store's edge, from its Store interface).
	go generate ./...

UPLOT_VERSION := 1.6.32
UI_VENDOR := internal/server/ui/vendor/uplot

ui-vendor: ## Refresh the dashboard's vendored uPlot (UPLOT_VERSION) from npm; commit the result.
	tmp=$$(mktemp -d) && (cd $$tmp && npm pack --silent uplot@$(UPLOT_VERSION) >/dev/null && tar xzf uplot-$(UPLOT_VERSION).tgz) && \
	cp $$tmp/package/dist/uPlot.iife.min.js $$tmp/package/dist/uPlot.min.css $$tmp/package/LICENSE $(UI_VENDOR)/ && \
	echo "uPlot $(UPLOT_VERSION) from npm (make ui-vendor)" > $(UI_VENDOR)/VERSION && rm -rf $$tmp

test: ## Run all tests (the README's test command).
	go test ./...

test-race: ## Run all tests with the race detector, as CI does.
	go test -race -count=1 ./...

lint: ## Run golangci-lint (pinned version) on the module and on bench/.
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

fuzz: ## Run every fuzz target for FUZZTIME (default 10s).
	FUZZTIME=$${FUZZTIME:-10s} ./.ci/fuzz

bench: ## Run the Go benchmarks (engine, provider, mock, store).
	go test -run '^$$' -bench . -benchmem ./...

demo: ## Run the demo: mock provider + gateway + mixed workload, naive client side by side.
	go run ./cmd/sluice demo

ci: ## Run what CI runs.
	./.ci/run
