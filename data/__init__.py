"""Package data of the pipeline (installed as `cifar10_data`): the curated schema that
ImportSchemaGen imports, found with importlib.resources so a wheel install works too."""
