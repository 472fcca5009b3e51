"""Container images for any project: a Dockerfile rendered from cpubuild's template
(args from the project's matrix), builds through the Docker engine, local Debian
bases from debootstrap, and buildx bake files.

Modules import the docker SDK lazily: isa_args and requirements run inside a
build container, next to a freshly installed cpubuild."""
