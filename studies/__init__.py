"""What the project ran to check itself: the Fashion-MNIST studies, the paper's recipe wave by wave, and the command
a lent GPU runs with what it brings back; run as python -m studies.NAME from the root. They use the paper's files,
training/ and tools/, never the reverse."""
