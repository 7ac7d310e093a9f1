"""What lab 2's checks share: the statistical margin and the advice for a result that is not one number."""

# Standard errors a statistical comparison allows (the package docstring says why 5).
Z_SIGMA = 5.0

# The advice when a student's single number is not one finite real number.
ONE_NUMBER = ("Return one float: reduce over every sample at once (float(...) or .item() turns a one-entry array "
              "into a number); look for a log of 0 or a division by 0.")
