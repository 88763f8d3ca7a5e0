// Opens a TIFF with ImageJ's own opener, headless, and prints what ImageJ sees:
// "<slices> <width> <height> <bit depth> <mean of all slices> <value at (x, y) of slice s>".
// Run as: java -Djava.awt.headless=true -cp ij.jar ReadStack.java FILE X Y SLICE
import ij.IJ;
import ij.ImagePlus;
import ij.ImageStack;
import ij.process.ImageProcessor;

public class ReadStack {
    public static void main(String[] args) {
        ImagePlus image = IJ.openImage(args[0]);
        if (image == null) {
            System.err.println("ImageJ could not open " + args[0]);
            System.exit(2);
        }
        ImageStack stack = image.getStack();
        double sum = 0;
        long count = 0;
        for (int i = 1; i <= stack.getSize(); i++) {
            ImageProcessor plane = stack.getProcessor(i);
            for (int y = 0; y < plane.getHeight(); y++) {
                for (int x = 0; x < plane.getWidth(); x++) {
                    sum += plane.getf(x, y);
                    count++;
                }
            }
        }
        int x = Integer.parseInt(args[1]);
        int y = Integer.parseInt(args[2]);
        int slice = Integer.parseInt(args[3]);
        float value = stack.getProcessor(slice).getf(x, y);
        System.out.println(stack.getSize() + " " + image.getWidth() + " " + image.getHeight()
            + " " + image.getBitDepth() + " " + (sum / count) + " " + value);
    }
}
