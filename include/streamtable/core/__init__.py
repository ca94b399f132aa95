"""Layer 1, the model: what a pipeline declares (tables, schemas, rules, expectations, pipelines), the registry
of declarations, named errors, event times and the settings every layer reads. Imports no other layer."""
