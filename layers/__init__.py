"""The Lambda layers' builder (layers/build.py): a package, so `layers.build` is found beside a built layers/build/."""
