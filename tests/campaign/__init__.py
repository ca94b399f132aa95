"""The campaign of generated pipelines (issue 36): `draw(seed)` writes a pipeline with the public API alone, its
inputs and its model's outputs; `runner` runs it through the test driver or the CLI and compares. `make campaign`
(scripts/campaign.py) runs many; tests/test_campaign.py a few, in CI."""
