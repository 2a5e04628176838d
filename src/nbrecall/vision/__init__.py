"""Figure describers: the text drawn in a figure (OCR) or a vision model\x27s description, cached by image."""
