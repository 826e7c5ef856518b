"""Third-party programs (fetched from package registries, never committed) built and run in the kernel."""
