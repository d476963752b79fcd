"""Storage: where every file of the pipeline lives and how it is read and written.

Owns the object stores (`object_store`: gs:// and s3:// for tf.io.gfile, the s3:// step
entrypoint `s3_entrypoint`), path helpers that work the same on a local disk and a store
(`paths`), the served versions of a serving folder and what each records (`served_versions`),
the facts each night's steps write (`night_facts`) and TFX's file layout (`tfx_files`).
May import `components.runtime` and `components.contract`, nothing else of the project.
"""
